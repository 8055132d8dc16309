//! Helpers for handling secrets: constant-time comparison and redacted debug output. Defined in
//! the plugin API.

pub use portcullis_plugin_api::secret::*;
