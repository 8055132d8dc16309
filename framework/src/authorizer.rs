//! The authorizer plugin kind (kafka-security-semantics §6.2). Defined in the plugin API.

pub use portcullis_plugin_api::authorizer::*;
