//! Client-side authentication: how Portcullis authenticates its own connections to the upstream.
//! Defined in the plugin API.

pub use portcullis_plugin_api::login::*;
