//! Kafka wire handling for the security layer: request headers, the pre-authentication APIs,
//! response encoding and the advertised API versions.
//!
//! Only three request bodies are ever decoded from clients here: ApiVersions, SaslHandshake and
//! SaslAuthenticate. None of them carries an array, so kafka-protocol's unbounded array
//! preallocation (a 4-byte `7f ff ff ff` Metadata v0 body aborts the process) cannot be reached
//! from a client. Every other request is forwarded as the bytes the client sent.

pub mod api;
pub mod codec;
pub mod header;
pub mod produce;
pub mod reader;
pub mod versions;
