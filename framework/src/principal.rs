//! Principals and how an authenticated identity (SASL, and on TLS listeners the client
//! certificate) becomes one. Defined in the plugin API.

pub use portcullis_plugin_api::principal::*;
