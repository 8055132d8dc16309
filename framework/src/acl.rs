//! Kafka's ACL model with its wire codes (kafka-security-semantics §6.1). Defined in the plugin
//! API.

pub use portcullis_plugin_api::acl::*;
