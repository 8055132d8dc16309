//! Forwarding policies decide, per request, where it is served. Defined in the plugin API.

pub use portcullis_plugin_api::forwarding::*;
