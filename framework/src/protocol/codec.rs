//! Encoding responses and decoding the three pre-authentication request bodies, with kafka-protocol's
//! `anyhow` errors turned into a typed error at this boundary.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

/// A body that could not be decoded or a response that could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The request body does not parse at this version.
    #[error("cannot decode {api} v{version} request body")]
    Decode {
        /// The API name.
        api: &'static str,
        /// The version.
        version: i16,
    },
    /// The response could not be encoded (a value out of range for the wire type).
    #[error("cannot encode {api} v{version} response")]
    Encode {
        /// The API name.
        api: &'static str,
        /// The version.
        version: i16,
    },
}

/// Decodes a request body (the bytes after the header).
pub fn decode_body<T: Decodable>(
    api: &'static str,
    body: &[u8],
    version: i16,
) -> Result<T, CodecError> {
    let mut buf = Bytes::copy_from_slice(body);
    let decoded = T::decode(&mut buf, version).map_err(|_| CodecError::Decode { api, version })?;
    Ok(decoded)
}

/// Encodes a response frame (header + body, without the 4-byte size prefix).
pub fn encode_response<T: Encodable>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, CodecError> {
    let api = api_name(api_key);
    let err = || CodecError::Encode {
        api,
        version: api_version,
    };
    let mut out = BytesMut::with_capacity(64);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, api_key.response_header_version(api_version))
        .map_err(|_| err())?;
    body.encode(&mut out, api_version).map_err(|_| err())?;
    Ok(out.freeze())
}

fn api_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        _ => "Kafka",
    }
}
