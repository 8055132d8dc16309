//! The server side of a SASL mechanism (KIP-43): a factory per mechanism and a synchronous,
//! step-by-step exchange per authentication. Defined in the plugin API.

pub use portcullis_plugin_api::sasl::*;
