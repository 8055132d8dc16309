//! The responses the security layer answers itself.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::errors::ErrorCode;
use crate::protocol::codec::{encode_response, CodecError};
use crate::protocol::versions::ApiVersionTable;

/// The highest ApiVersions version Portcullis answers.
pub(crate) const API_VERSIONS_MAX: i16 = 4;

pub(crate) fn api_versions(
    table: &ApiVersionTable,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, CodecError> {
    encode_response(
        ApiKey::ApiVersions,
        version,
        correlation_id,
        &table.to_response(ErrorCode::NONE.0),
    )
}

/// KIP-511: an ApiVersions request at a version we do not know is answered at v0 with
/// UNSUPPORTED_VERSION and our ApiVersions range, so the client can retry with a version we speak.
pub(crate) fn api_versions_unsupported(correlation_id: i32) -> Result<Bytes, CodecError> {
    let table = ApiVersionTable::from_ranges([(ApiKey::ApiVersions as i16, 0, API_VERSIONS_MAX)]);
    let body: ApiVersionsResponse = table.to_response(ErrorCode::UNSUPPORTED_VERSION.0);
    encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)
}

pub(crate) fn api_versions_error(
    code: ErrorCode,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, CodecError> {
    let body = ApiVersionsResponse::default().with_error_code(code.0);
    encode_response(ApiKey::ApiVersions, version, correlation_id, &body)
}

pub(crate) fn handshake(
    code: ErrorCode,
    mechanisms: &[String],
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, CodecError> {
    let body = SaslHandshakeResponse::default()
        .with_error_code(code.0)
        .with_mechanisms(
            mechanisms
                .iter()
                .map(|m| StrBytes::from_string(m.clone()))
                .collect(),
        );
    encode_response(ApiKey::SaslHandshake, version, correlation_id, &body)
}

pub(crate) fn authenticate(
    code: ErrorCode,
    message: Option<String>,
    auth_bytes: Vec<u8>,
    session_lifetime_ms: i64,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, CodecError> {
    let body = SaslAuthenticateResponse::default()
        .with_error_code(code.0)
        .with_error_message(message.map(StrBytes::from_string))
        .with_auth_bytes(Bytes::from(auth_bytes))
        .with_session_lifetime_ms(session_lifetime_ms);
    encode_response(ApiKey::SaslAuthenticate, version, correlation_id, &body)
}
