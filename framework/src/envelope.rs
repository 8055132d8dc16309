//! KIP-590 forwarding on the wire: the Envelope request and response (API 58, v0, flexible) and
//! the principal serde of Kafka's `DefaultKafkaPrincipalBuilder` (`DefaultPrincipalData` v0).
//!
//! A node that is not its cluster's writer wraps a client's security mutation — the client's
//! request bytes unchanged, its principal and its IP — in an Envelope and sends it to the writer
//! over the inter-node listener; the writer answers with the inner response in an Envelope
//! response (kafka-security-semantics §7.1). Everything decoded here comes from a peer over the
//! network, so it is read with the bounds-checked [`Reader`]: a forged length is an error, never an
//! allocation or a panic.

use std::net::IpAddr;

use bytes::{BufMut, Bytes, BytesMut};

use crate::errors::ErrorCode;
use crate::local::forwarded::request_id::RequestId;
use crate::principal::Principal;
use crate::protocol::api::{
    ALTER_USER_SCRAM_CREDENTIALS, CREATE_ACLS, CREATE_DELEGATION_TOKEN, DELETE_ACLS, ENVELOPE,
    EXPIRE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN,
};
use crate::protocol::reader::{Malformed, Reader};

/// The only Envelope version (Kafka 2.8 to 4.x).
pub const ENVELOPE_VERSION: i16 = 0;
/// The only `DefaultPrincipalData` version.
pub const PRINCIPAL_DATA_VERSION: i16 = 0;

/// The security mutations a node that is not the writer forwards (Kafka's `ApiKeys.forwardable`,
/// restricted to the APIs Portcullis serves itself).
pub const FORWARDABLE: [i16; 6] = [
    CREATE_ACLS,
    DELETE_ACLS,
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_DELEGATION_TOKEN,
    RENEW_DELEGATION_TOKEN,
    EXPIRE_DELEGATION_TOKEN,
];

/// Whether requests of `api_key` go to the cluster's writer.
pub fn is_forwardable(api_key: i16) -> bool {
    FORWARDABLE.contains(&api_key)
}

/// The tag of the tagged field of the Envelope request body in which a Portcullis node carries
/// the mutation's [`RequestId`] (the same for each retry of it, so that the writer applies it
/// once). `EnvelopeRequest` defines no tagged field; a receiver that does not know this one skips
/// it, as Kafka's generated readers do with every unknown tag. The number is far from any Kafka
/// would assign, next to [`GROUPS_TAG`].
pub const REQUEST_ID_TAG: u32 = 0x5043_0002;

/// The most tagged fields an Envelope request body may have: Portcullis writes one, Kafka none.
const MAX_TAGGED_FIELDS: u32 = 16;

/// An Envelope request body, borrowed from the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvelopeRequest<'a> {
    /// The client's request: header and body, as the client sent them.
    pub request_data: &'a [u8],
    /// The serialized principal (`None` if the forwarder sent null).
    pub principal: Option<&'a [u8]>,
    /// The client's IP: 4 or 16 raw bytes.
    pub client_host: &'a [u8],
    /// The mutation's request id (tagged field [`REQUEST_ID_TAG`]), when the forwarder sent one.
    pub request_id: Option<RequestId>,
}

/// Decodes an Envelope v0 request body (the bytes after the request header).
///
/// # Errors
/// The body is truncated or its lengths run past it; more than 16 tagged fields; a
/// [`REQUEST_ID_TAG`] field twice, or one that is not a [`RequestId`].
pub fn decode_request(body: &[u8]) -> Result<EnvelopeRequest<'_>, Malformed> {
    let mut r = Reader::new(body);
    let request_data = r.compact_bytes()?;
    let principal = r.compact_nullable_bytes()?;
    let client_host = r.compact_bytes()?;
    let mut request_id = None;
    let fields = r.uvarint()?;
    if fields > MAX_TAGGED_FIELDS {
        return Err(Malformed("too many tagged fields"));
    }
    for _ in 0..fields {
        let tag = r.uvarint()?;
        let size = r.uvarint()? as usize;
        let data = r.raw(size)?;
        if tag == REQUEST_ID_TAG {
            if request_id.is_some() {
                return Err(Malformed("two request ids"));
            }
            request_id = Some(RequestId::parse(data).map_err(|_| Malformed("request id"))?);
        }
    }
    r.end_of_request();
    Ok(EnvelopeRequest {
        request_data,
        principal,
        client_host,
        request_id,
    })
}

/// Encodes a whole Envelope v0 request frame (header v2 and body, without the size prefix),
/// without a request id (Kafka's exact bytes).
pub fn encode_request(
    correlation_id: i32,
    client_id: &str,
    request_data: &[u8],
    principal: &[u8],
    client_address: IpAddr,
) -> Bytes {
    encode_request_with_id(
        correlation_id,
        client_id,
        request_data,
        principal,
        client_address,
        None,
    )
}

/// [`encode_request`] with the mutation's request id in the tagged field [`REQUEST_ID_TAG`].
pub fn encode_request_with_id(
    correlation_id: i32,
    client_id: &str,
    request_data: &[u8],
    principal: &[u8],
    client_address: IpAddr,
    request_id: Option<&RequestId>,
) -> Bytes {
    let host = ip_bytes(client_address);
    let mut out =
        BytesMut::with_capacity(32 + client_id.len() + request_data.len() + principal.len());
    out.put_i16(ENVELOPE);
    out.put_i16(ENVELOPE_VERSION);
    out.put_i32(correlation_id);
    put_nullable_string(&mut out, Some(client_id));
    out.put_u8(0); // header tagged fields
    put_compact_bytes(&mut out, Some(request_data));
    put_compact_bytes(&mut out, Some(principal));
    put_compact_bytes(&mut out, Some(&host));
    match request_id {
        None => out.put_u8(0), // no tagged fields
        Some(id) => {
            put_uvarint(&mut out, 1);
            put_uvarint(&mut out, u64::from(REQUEST_ID_TAG));
            put_uvarint(&mut out, id.as_str().len() as u64);
            out.put_slice(id.as_str().as_bytes());
        }
    }
    out.freeze()
}

/// An Envelope response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvelopeResponse {
    /// The envelope's own error: NONE, NOT_CONTROLLER, CLUSTER_AUTHORIZATION_FAILED, ….
    pub error: ErrorCode,
    /// The inner response (header and body) when `error` is NONE.
    pub response_data: Option<Bytes>,
}

/// Encodes a whole Envelope v0 response frame (header v1 and body).
pub fn encode_response(correlation_id: i32, response: &EnvelopeResponse) -> Bytes {
    let data_len = response.response_data.as_ref().map_or(0, Bytes::len);
    let mut out = BytesMut::with_capacity(16 + data_len);
    out.put_i32(correlation_id);
    out.put_u8(0); // header tagged fields
    put_compact_bytes(&mut out, response.response_data.as_deref());
    out.put_i16(response.error.0);
    out.put_u8(0); // body tagged fields
    out.freeze()
}

/// Decodes a whole Envelope v0 response frame: its correlation id and the response.
///
/// # Errors
/// The frame is truncated, its lengths run past it, or it has bytes after its last field.
pub fn decode_response(frame: &[u8]) -> Result<(i32, EnvelopeResponse), Malformed> {
    let mut r = Reader::new(frame);
    let correlation_id = r.i32()?;
    r.skip_tagged_fields()?;
    let response_data = r.compact_nullable_bytes()?.map(Bytes::copy_from_slice);
    let error = ErrorCode(r.i16()?);
    r.skip_tagged_fields()?;
    r.finish()?;
    Ok((
        correlation_id,
        EnvelopeResponse {
            error,
            response_data,
        },
    ))
}

/// An IP address as the Envelope carries it: 4 bytes for IPv4, 16 for IPv6.
pub fn ip_bytes(address: IpAddr) -> Vec<u8> {
    match address {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// Parses [`ip_bytes`]' output; any other length is not an address (Kafka: INVALID_REQUEST).
pub fn parse_ip(bytes: &[u8]) -> Option<IpAddr> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Some(IpAddr::from(v4));
    }
    <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from)
}

/// A principal as it travels in an Envelope: Kafka's `KafkaPrincipal` with its
/// `tokenAuthenticated` flag, which the writer needs (a token-authenticated principal may not
/// create, renew or expire tokens), and the session's group principals, which the writer
/// authorizes the request with too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedPrincipal {
    /// The principal.
    pub principal: Principal,
    /// Whether it authenticated with a delegation token.
    pub token_authenticated: bool,
    /// The session's group principals (a bearer token's groups), empty for most sessions.
    pub groups: Vec<Principal>,
}

/// The tag of the tagged field in which Portcullis carries a forwarded session's group principals
/// (`DefaultPrincipalData` defines no tagged field; Kafka never writes one, and this number is far
/// from any it would assign). Without groups nothing is written: Kafka's exact bytes.
pub const GROUPS_TAG: u32 = 0x5043_0001;

/// Why a serialized principal was refused (the envelope then fails with
/// PRINCIPAL_DESERIALIZATION_FAILURE).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrincipalSerdeError {
    /// The version prefix is not one Kafka's `DefaultKafkaPrincipalBuilder` writes.
    #[error("Invalid principal data version {0}")]
    UnknownVersion(i16),
    /// The bytes are not a `DefaultPrincipalData`.
    #[error("invalid principal data: {0}")]
    Malformed(#[from] Malformed),
    /// Type or name is empty (Kafka's principals never are).
    #[error("invalid principal data: empty principal type or name")]
    Empty,
}

/// Serializes a principal as Kafka's `DefaultKafkaPrincipalBuilder.serialize` does
/// (`MessageUtil.toVersionPrefixedBytes`): a 2-byte version (0), then `DefaultPrincipalData` v0
/// (flexible): compact strings `Type` and `Name`, `TokenAuthenticated`, no tagged fields — or,
/// for a session with groups, one tagged field [`GROUPS_TAG`]: a varint count, then each group's
/// compact type and name.
pub fn serialize_principal(principal: &ForwardedPrincipal) -> Vec<u8> {
    let mut out = BytesMut::with_capacity(
        8 + principal.principal.kind.len() + principal.principal.name.len(),
    );
    out.put_i16(PRINCIPAL_DATA_VERSION);
    put_compact_string(&mut out, &principal.principal.kind);
    put_compact_string(&mut out, &principal.principal.name);
    out.put_u8(u8::from(principal.token_authenticated));
    if principal.groups.is_empty() {
        out.put_u8(0);
    } else {
        let mut groups = BytesMut::new();
        put_uvarint(&mut groups, principal.groups.len() as u64);
        for group in &principal.groups {
            put_compact_string(&mut groups, &group.kind);
            put_compact_string(&mut groups, &group.name);
        }
        put_uvarint(&mut out, 1);
        put_uvarint(&mut out, u64::from(GROUPS_TAG));
        put_uvarint(&mut out, groups.len() as u64);
        out.put_slice(&groups);
    }
    out.to_vec()
}

/// The groups of the tagged field [`GROUPS_TAG`]: all of its bytes, each type and name non-empty.
fn read_groups(bytes: &[u8]) -> Result<Vec<Principal>, PrincipalSerdeError> {
    let mut r = Reader::new(bytes);
    let count = r.uvarint()? as usize;
    // Each group takes at least four bytes: a count cannot make the reader reserve more.
    if count == 0 || count > bytes.len() / 4 {
        return Err(Malformed("group count").into());
    }
    let mut groups = Vec::with_capacity(count);
    for _ in 0..count {
        let kind = r.compact_string()?;
        let name = r.compact_string()?;
        if kind.is_empty() || name.is_empty() {
            return Err(PrincipalSerdeError::Empty);
        }
        groups.push(Principal { kind, name });
    }
    r.finish()?;
    Ok(groups)
}

/// Parses [`serialize_principal`]'s format (Kafka's `DefaultKafkaPrincipalBuilder.deserialize`).
/// Stricter than Kafka in one way: bytes after the tagged fields are refused, since a correct
/// serializer never writes them.
///
/// # Errors
/// [`PrincipalSerdeError`].
pub fn deserialize_principal(bytes: &[u8]) -> Result<ForwardedPrincipal, PrincipalSerdeError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version != PRINCIPAL_DATA_VERSION {
        return Err(PrincipalSerdeError::UnknownVersion(version));
    }
    let kind = r.compact_string()?;
    let name = r.compact_string()?;
    // Strict where Kafka's reader is lenient (any non-zero byte is `true`, unknown tagged fields
    // are skipped): Kafka's serializer writes 0 or 1 and no tagged field, and Portcullis' only the
    // groups, so anything else is not a principal a node sent, and is refused rather than guessed
    // at.
    let token_authenticated = match r.i8()? {
        0 => false,
        1 => true,
        _ => return Err(Malformed("TokenAuthenticated is not 0 or 1").into()),
    };
    let groups = match r.uvarint()? {
        0 => Vec::new(),
        1 => {
            if r.uvarint()? != GROUPS_TAG {
                return Err(Malformed("unexpected tagged fields").into());
            }
            let size = r.uvarint()? as usize;
            read_groups(r.raw(size)?)?
        }
        _ => return Err(Malformed("unexpected tagged fields").into()),
    };
    r.finish()?;
    if kind.is_empty() || name.is_empty() {
        return Err(PrincipalSerdeError::Empty);
    }
    let principal = ForwardedPrincipal {
        principal: Principal { kind, name },
        token_authenticated,
        groups,
    };
    // A length written as a longer varint than needed (`0x86 0x00` for 6) is read by Kafka's
    // reader too, but no serializer writes it: for the same reason as above, only the bytes
    // Kafka's (and this) serializer would write for this principal are taken. Found by the
    // envelope fuzz target.
    if serialize_principal(&principal) != bytes {
        return Err(Malformed("a varint longer than its value needs").into());
    }
    Ok(principal)
}

fn put_uvarint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn put_compact_bytes(out: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => out.put_u8(0),
        Some(b) => {
            put_uvarint(out, b.len() as u64 + 1);
            out.put_slice(b);
        }
    }
}

fn put_compact_string(out: &mut BytesMut, s: &str) {
    put_compact_bytes(out, Some(s.as_bytes()));
}

fn put_nullable_string(out: &mut BytesMut, s: Option<&str>) {
    match s {
        None => out.put_i16(-1),
        Some(s) => {
            // A client id longer than i16::MAX cannot be sent; it is cut (it is informational).
            let len = s.len().min(i16::MAX as usize);
            out.put_i16(len as i16);
            out.put_slice(s.as_bytes().get(..len).unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests;
