//! API keys Portcullis treats specially (defined in the plugin API, where forwarding policies
//! use them too), and the local APIs it serves.

pub use portcullis_plugin_api::api_keys::*;

/// The local APIs Portcullis serves today, with the versions it speaks. The other security APIs
/// are not advertised until their handlers exist.
pub const LOCAL_APIS: &[(i16, i16, i16)] = &[
    (SASL_HANDSHAKE, 0, 1),
    (API_VERSIONS, 0, 4),
    (SASL_AUTHENTICATE, 0, 2),
];

/// Whether a local handler exists for the API.
pub fn is_served_locally(api_key: i16) -> bool {
    LOCAL_APIS.iter().any(|(k, _, _)| *k == api_key)
}
