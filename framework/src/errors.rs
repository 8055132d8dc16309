//! Kafka error codes Portcullis sends (`org.apache.kafka.common.protocol.Errors`). Defined in the
//! plugin API.

pub use portcullis_plugin_api::errors::*;
