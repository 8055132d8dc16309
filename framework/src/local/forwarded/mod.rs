//! Security mutations that travel between the nodes of a cluster sharing one metadata log
//! (KIP-590, kafka-security-semantics §7).
//!
//! - On the writer: [`run_on_writer`] unwraps a forwarded request (or the writer's own client's)
//!   and runs the local handler as the *original* principal and client address, so ACLs and host
//!   rules apply to the client, not to the forwarding node.
//! - On the forwarder: [`error_response`] builds the answer the client gets when the writer gave
//!   none (Kafka's `getErrorResponse` of the inner API): UNKNOWN_SERVER_ERROR for an envelope
//!   error, REQUEST_TIMED_OUT when no writer answered in time.
//! - Each mutation has one [`RequestId`] for all its retries; the writer applies it once
//!   ([`writer::run_once`], [`dedup`]): a retry after a writer failover gets the first answer.

pub mod dedup;
pub mod recorded;
pub(crate) mod request_id;
pub mod writer;

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsResponse, ApiKey, CreateAclsResponse, CreateDelegationTokenResponse,
    DeleteAclsResponse, ExpireDelegationTokenResponse, RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::{Effect, LocalHandler, LocalRequest};
use crate::connection::session::Session;
use crate::envelope::{is_forwardable, ForwardedPrincipal};
use crate::errors::ErrorCode;
use crate::protocol::api::{
    ALTER_USER_SCRAM_CREDENTIALS, CREATE_ACLS, CREATE_DELEGATION_TOKEN, DELETE_ACLS,
    EXPIRE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN,
};
use crate::protocol::codec::encode_response;
use crate::protocol::header;
use crate::protocol::reader::{Malformed, Reader};

pub use request_id::{RequestId, RequestIdError, RequestIds, MAX_LEN as REQUEST_ID_MAX_LEN};

/// Runs a mutation on the cluster's writer: `frame` is the client's request (header and body),
/// `principal` and `client_address` the client's. Returns the handler's effect, or the envelope
/// error Kafka's controller gives (§7.3): UNSUPPORTED_VERSION when the inner header cannot be
/// parsed or its version is not served, INVALID_REQUEST for an API that is not forwardable.
///
/// # Errors
/// The envelope error code.
pub fn run_on_writer(
    handlers: &[Arc<dyn LocalHandler>],
    frame: &Bytes,
    principal: &ForwardedPrincipal,
    client_address: IpAddr,
    listener: &str,
    now_ms: i64,
) -> Result<Effect, ErrorCode> {
    let header = header::parse(frame).map_err(|_| ErrorCode::UNSUPPORTED_VERSION)?;
    if !is_forwardable(header.api_key) {
        return Err(ErrorCode::INVALID_REQUEST);
    }
    let handler = handlers
        .iter()
        .find(|h| h.api_key() == header.api_key)
        .ok_or(ErrorCode::INVALID_REQUEST)?;
    let (min, max) = handler.versions();
    if header.api_version < min || header.api_version > max {
        return Err(ErrorCode::UNSUPPORTED_VERSION);
    }
    let session = Session::forwarded(principal, now_ms);
    let request = LocalRequest {
        header: &header,
        body: frame.get(header.header_len..).unwrap_or_default(),
        session: &session,
        client_address,
        listener,
        now_ms,
    };
    Ok(handler.handle(&request))
}

/// The inner API's response carrying `code` for everything the client asked (Kafka's
/// `AbstractRequest.getErrorResponse`). `None` when the request cannot be read: the client's
/// connection is then closed, as for any unparseable request.
pub fn error_response(frame: &Bytes, code: ErrorCode) -> Option<Bytes> {
    let header = header::parse(frame).ok()?;
    let body = frame.get(header.header_len..)?;
    let (version, correlation_id) = (header.api_version, header.correlation_id);
    let message = || Some(StrBytes::from_static_str(code.name()));
    match header.api_key {
        CREATE_ACLS => {
            let n = count_acl_entries(body, version >= 2, false).ok()?;
            let results = (0..n)
                .map(|_| {
                    AclCreationResult::default()
                        .with_error_code(code.0)
                        .with_error_message(message())
                })
                .collect();
            let response = CreateAclsResponse::default().with_results(results);
            encode(ApiKey::CreateAcls, version, correlation_id, &response)
        }
        DELETE_ACLS => {
            let n = count_acl_entries(body, version >= 2, true).ok()?;
            let results = (0..n)
                .map(|_| {
                    DeleteAclsFilterResult::default()
                        .with_error_code(code.0)
                        .with_error_message(message())
                })
                .collect();
            let response = DeleteAclsResponse::default().with_filter_results(results);
            encode(ApiKey::DeleteAcls, version, correlation_id, &response)
        }
        ALTER_USER_SCRAM_CREDENTIALS => {
            let users = scram_alteration_users(body).ok()?;
            let results = users
                .into_iter()
                .map(|user| {
                    AlterUserScramCredentialsResult::default()
                        .with_user(StrBytes::from_string(user))
                        .with_error_code(code.0)
                        .with_error_message(message())
                })
                .collect();
            let response = AlterUserScramCredentialsResponse::default().with_results(results);
            encode(
                ApiKey::AlterUserScramCredentials,
                version,
                correlation_id,
                &response,
            )
        }
        CREATE_DELEGATION_TOKEN => {
            // Kafka answers with the ANONYMOUS principal as owner (and requester, v3).
            let anonymous = crate::principal::Principal::anonymous();
            let mut response = CreateDelegationTokenResponse::default()
                .with_error_code(code.0)
                .with_principal_type(StrBytes::from_string(anonymous.kind.clone()))
                .with_principal_name(StrBytes::from_string(anonymous.name.clone()));
            if version >= 3 {
                response = response
                    .with_token_requester_principal_type(StrBytes::from_string(anonymous.kind))
                    .with_token_requester_principal_name(StrBytes::from_string(anonymous.name));
            }
            encode(
                ApiKey::CreateDelegationToken,
                version,
                correlation_id,
                &response,
            )
        }
        RENEW_DELEGATION_TOKEN => {
            let response = RenewDelegationTokenResponse::default().with_error_code(code.0);
            encode(
                ApiKey::RenewDelegationToken,
                version,
                correlation_id,
                &response,
            )
        }
        EXPIRE_DELEGATION_TOKEN => {
            let response = ExpireDelegationTokenResponse::default().with_error_code(code.0);
            encode(
                ApiKey::ExpireDelegationToken,
                version,
                correlation_id,
                &response,
            )
        }
        _ => None,
    }
}

fn encode<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &T) -> Option<Bytes> {
    encode_response(key, version, correlation_id, body).ok()
}

/// The number of creations (CreateAcls) or filters (DeleteAcls) in a request body.
fn count_acl_entries(body: &[u8], flexible: bool, filters: bool) -> Result<usize, Malformed> {
    let mut r = Reader::new(body);
    let count = r.any_array_len(flexible)?.unwrap_or(0);
    for _ in 0..count {
        r.i8()?; // resource type
        if filters {
            r.any_nullable_str(flexible)?;
        } else {
            r.any_str(flexible)?;
        }
        r.i8()?; // pattern type
        for _ in 0..2 {
            // principal, host
            if filters {
                r.any_nullable_str(flexible)?;
            } else {
                r.any_str(flexible)?;
            }
        }
        r.i8()?; // operation
        r.i8()?; // permission
        if flexible {
            r.skip_tagged_fields()?;
        }
    }
    Ok(count)
}

/// The users an AlterUserScramCredentials names (deletions, then upsertions), each once, in
/// order: Kafka's error response has one result per user.
fn scram_alteration_users(body: &[u8]) -> Result<Vec<String>, Malformed> {
    let mut r = Reader::new(body);
    let mut users: Vec<String> = Vec::new();
    let mut add = |user: &str| {
        if !users.iter().any(|u| u == user) {
            users.push(user.to_owned());
        }
    };
    for _ in 0..r.compact_array_len()?.unwrap_or(0) {
        add(r.compact_nullable_str()?.ok_or(Malformed("null user"))?);
        r.i8()?;
        r.skip_tagged_fields()?;
    }
    for _ in 0..r.compact_array_len()?.unwrap_or(0) {
        add(r.compact_nullable_str()?.ok_or(Malformed("null user"))?);
        r.i8()?;
        r.i32()?;
        r.compact_bytes()?;
        r.compact_bytes()?;
        r.skip_tagged_fields()?;
    }
    Ok(users)
}

#[cfg(test)]
mod tests;
