//! Encoding the host's own requests and decoding (and re-encoding) upstream responses with
//! kafka-protocol, its `anyhow` errors turned into a typed error at this boundary.
//!
//! Only responses from the upstream cluster (the operator's own brokers) are decoded here, never a
//! client's request body: the framework forwards those as bytes.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The client id on Portcullis' own upstream requests.
pub const CLIENT_ID: &str = "portcullis";

/// A message that could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A response that does not parse as the API and version it answers.
    #[error("cannot decode {api:?} v{version} response")]
    Decode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
    },
    /// A message that cannot be written at this version.
    #[error("cannot encode {api:?} v{version}")]
    Encode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
    },
}

/// Encodes a request frame (header + body, without the size prefix).
pub fn encode_request<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, WireError> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.request_header_version(version))
        .and_then(|()| body.encode(&mut out, version))
        .map_err(|_| WireError::Encode { api, version })?;
    Ok(out.freeze())
}

/// Decodes a response frame of `api` at `version` into its header and body.
pub fn decode_response<T: Decodable>(
    api: ApiKey,
    version: i16,
    frame: Bytes,
) -> Result<(ResponseHeader, T), WireError> {
    let mut buf = frame;
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .map_err(|_| WireError::Decode { api, version })?;
    let body = T::decode(&mut buf, version).map_err(|_| WireError::Decode { api, version })?;
    Ok((header, body))
}

/// Encodes a response frame (header + body, without the size prefix).
pub fn encode_response<T: Encodable>(
    api: ApiKey,
    version: i16,
    header: &ResponseHeader,
    body: &T,
) -> Result<Bytes, WireError> {
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.response_header_version(version))
        .and_then(|()| body.encode(&mut out, version))
        .map_err(|_| WireError::Encode { api, version })?;
    Ok(out.freeze())
}

/// The correlation id at the start of a response frame.
pub fn response_correlation_id(frame: &[u8]) -> Option<i32> {
    match frame {
        [a, b, c, d, ..] => Some(i32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}
