//! Responses as the log records them for retries ([`super::dedup`]): unchanged, except that a
//! CreateDelegationToken response loses its HMAC — the token's password, which the log must not
//! hold (a reader of the topic could authenticate as the token's owner). The HMAC is a function of
//! the token id and the cluster's token secret, so the writer that answers a retry recomputes it.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, CreateDelegationTokenResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;

use crate::protocol::api::CREATE_DELEGATION_TOKEN;
use crate::protocol::codec::encode_response;
use crate::protocol::header;

/// Recomputes a token's HMAC from its id (`None`: this node has no token secret).
pub type TokenHmac<'a> = &'a (dyn Fn(&str) -> Option<Vec<u8>> + Sync);

/// The response to record for the request `frame`; `None` if it cannot be read back (then
/// nothing is recorded, and a retry gets REQUEST_TIMED_OUT rather than a second effect).
pub fn to_record(frame: &Bytes, response: &Bytes) -> Option<Vec<u8>> {
    let header = header::parse(frame).ok()?;
    if header.api_key != CREATE_DELEGATION_TOKEN {
        return Some(response.to_vec());
    }
    let (correlation_id, mut body) = decode_token_response(response, header.api_version)?;
    body.hmac = Bytes::new();
    encode_response(
        ApiKey::CreateDelegationToken,
        header.api_version,
        correlation_id,
        &body,
    )
    .ok()
    .map(|b| b.to_vec())
}

/// The answer to a retry of `frame` from its recorded response; `None` when it cannot be rebuilt
/// (the HMAC of a created token cannot be recomputed here).
pub fn from_record(frame: &Bytes, recorded: &Bytes, token_hmac: TokenHmac<'_>) -> Option<Bytes> {
    let header = header::parse(frame).ok()?;
    if header.api_key != CREATE_DELEGATION_TOKEN {
        return Some(recorded.clone());
    }
    let (correlation_id, mut body) = decode_token_response(recorded, header.api_version)?;
    if body.error_code != 0 {
        return Some(recorded.clone());
    }
    body.hmac = Bytes::from(token_hmac(body.token_id.as_str())?);
    encode_response(
        ApiKey::CreateDelegationToken,
        header.api_version,
        correlation_id,
        &body,
    )
    .ok()
}

fn decode_token_response(
    response: &Bytes,
    version: i16,
) -> Option<(i32, CreateDelegationTokenResponse)> {
    let mut buf = response.clone();
    let header = ResponseHeader::decode(
        &mut buf,
        ApiKey::CreateDelegationToken.response_header_version(version),
    )
    .ok()?;
    let body = CreateDelegationTokenResponse::decode(&mut buf, version).ok()?;
    Some((header.correlation_id, body))
}
