//! CreateDelegationToken (38), RenewDelegationToken (39), ExpireDelegationToken (40) and
//! DescribeDelegationToken (41), served by Portcullis with Kafka's checks in Kafka's order
//! (kafka-security-semantics §5.4–§5.8): the broker's checks first (the gate, the owner check,
//! the renewers' type), then the controller's (tokens disabled, then the token's own checks in
//! [`TokenManager`]).
//!
//! Error answers carry the timestamps Kafka's do: the broker's early refusals `-1`, the
//! controller's refusals `0`.

pub mod decode;
mod describe;

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, CreateDelegationTokenResponse, ExpireDelegationTokenResponse,
    RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::StrBytes;

use self::decode::{CreateBody, HmacBody, NamedPrincipal};
use super::{Effect, LocalHandler, LocalRequest, Persist, PersistError, PersistOutcome};
use crate::acl::{AclOperation, ResourceType};
use crate::authorizer::Authorizer;
use crate::connection::session::Session;
use crate::errors::ErrorCode;
use crate::metrics::{SecurityRecorder, TokenOperation};
use crate::principal::{Principal, USER_TYPE};
use crate::protocol::api::{
    CREATE_DELEGATION_TOKEN, DESCRIBE_DELEGATION_TOKEN, EXPIRE_DELEGATION_TOKEN,
    RENEW_DELEGATION_TOKEN,
};
use crate::telemetry::SPAN_TARGET;
use crate::tokens::{CreateRequest, TokenInfo, TokenManager};

/// Kafka's `DelegationTokenManager.ErrorTimestamp`: the timestamps of the broker's refusals.
const ERROR_TIMESTAMP: i64 = -1;

/// The four token APIs over the node's token manager (`None`: tokens are disabled, as with a
/// Kafka broker without `delegation.token.secret.key`; the APIs are still served and answer
/// DELEGATION_TOKEN_AUTH_DISABLED, as Kafka's are).
#[derive(Clone)]
pub struct DelegationTokenApis {
    manager: Option<Arc<TokenManager>>,
    authorizer: Option<Arc<dyn Authorizer>>,
    recorder: Option<Arc<dyn SecurityRecorder>>,
    api_key: i16,
}

impl DelegationTokenApis {
    /// The four handlers. Without an authorizer every check is allowed, as on a Kafka broker
    /// without one.
    pub fn handlers(
        manager: Option<Arc<TokenManager>>,
        authorizer: Option<Arc<dyn Authorizer>>,
    ) -> [Arc<dyn LocalHandler>; 4] {
        Self::handlers_recording(manager, authorizer, None)
    }

    /// The four handlers, each answered operation counted by `recorder` (the host's telemetry).
    pub fn handlers_recording(
        manager: Option<Arc<TokenManager>>,
        authorizer: Option<Arc<dyn Authorizer>>,
        recorder: Option<Arc<dyn SecurityRecorder>>,
    ) -> [Arc<dyn LocalHandler>; 4] {
        [
            CREATE_DELEGATION_TOKEN,
            RENEW_DELEGATION_TOKEN,
            EXPIRE_DELEGATION_TOKEN,
            DESCRIBE_DELEGATION_TOKEN,
        ]
        .map(|api_key| {
            Arc::new(Self {
                manager: manager.clone(),
                authorizer: authorizer.clone(),
                recorder: recorder.clone(),
                api_key,
            }) as Arc<dyn LocalHandler>
        })
    }

    /// Kafka's `authHelper.authorize`: allowed when there is no authorizer.
    fn allowed(
        &self,
        request: &LocalRequest<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.authorizer
            .as_deref()
            .is_none_or(|a| super::allowed(a, request, operation, resource_type, name))
    }
}

impl LocalHandler for DelegationTokenApis {
    fn api_key(&self) -> i16 {
        self.api_key
    }

    fn versions(&self) -> (i16, i16) {
        // What Kafka 4 serves (KIP-896 removed v0).
        match self.api_key {
            CREATE_DELEGATION_TOKEN | DESCRIBE_DELEGATION_TOKEN => (1, 3),
            _ => (1, 2),
        }
    }

    fn handle(&self, request: &LocalRequest<'_>) -> Effect {
        let version = request.header.api_version;
        let trace = self.trace(request);
        let malformed = |e: crate::protocol::reader::Malformed| {
            trace.finish("malformed");
            Effect::Close(e.into())
        };
        match self.api_key {
            CREATE_DELEGATION_TOKEN => match decode::create(request.body, version) {
                Ok(body) => self.create(request, body, trace.clone()),
                Err(e) => malformed(e),
            },
            RENEW_DELEGATION_TOKEN | EXPIRE_DELEGATION_TOKEN => {
                match decode::hmac_and_period(request.body, version) {
                    Ok(body) => self.renew_or_expire(request, body, trace.clone()),
                    Err(e) => malformed(e),
                }
            }
            _ => match decode::describe(request.body, version) {
                Ok(owners) => self.describe(request, owners, trace.clone()),
                Err(e) => malformed(e),
            },
        }
    }
}

/// Kafka's `allowTokenRequests`: no token API for a session authenticated with a token (so a
/// token cannot mint, renew, expire or even list tokens), nor for a connection that did not
/// authenticate with SASL. Portcullis' listeners always require SASL, so Kafka's PLAINTEXT and
/// one-way-TLS cases show up here only as a session without a mechanism.
pub fn token_requests_allowed(session: &Session) -> bool {
    session.token_id.is_none() && !session.mechanism.is_empty()
}

impl DelegationTokenApis {
    fn operation(&self) -> TokenOperation {
        match self.api_key {
            CREATE_DELEGATION_TOKEN => TokenOperation::Create,
            RENEW_DELEGATION_TOKEN => TokenOperation::Renew,
            EXPIRE_DELEGATION_TOKEN => TokenOperation::Expire,
            _ => TokenOperation::Describe,
        }
    }

    /// The operation's span, a child of the request's (current while the framework handles it).
    fn trace(&self, request: &LocalRequest<'_>) -> TokenTrace {
        let operation = self.operation();
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            "delegation_token",
            otel.name = tracing::field::Empty,
            token.operation = operation.as_str(),
            enduser.id = %request.session.principal,
            token.owner = tracing::field::Empty,
            token.id = tracing::field::Empty,
            token.count = tracing::field::Empty,
            token.outcome = tracing::field::Empty,
        );
        if !span.is_disabled() {
            span.record(
                "otel.name",
                format!("delegation_token.{}", operation.as_str()),
            );
        }
        TokenTrace {
            span,
            operation,
            recorder: self.recorder.clone(),
        }
    }
}

/// One token operation as traced and counted: the span stays open until the answer is known
/// (after the store persisted the change, for create / renew / expire). It records who and what,
/// never the HMAC (the token's password) nor anything derived from it.
#[derive(Clone)]
struct TokenTrace {
    span: tracing::Span,
    operation: TokenOperation,
    recorder: Option<Arc<dyn SecurityRecorder>>,
}

impl TokenTrace {
    /// The token the operation is about (known once the manager found or made it).
    fn token(&self, token_id: &str, owner: &Principal) {
        self.span.record("token.id", token_id);
        self.span
            .record("token.owner", tracing::field::display(owner));
    }

    /// The operation was answered: `success`, or why not.
    fn finish(&self, outcome: &'static str) {
        self.span.record("token.outcome", outcome);
        if let Some(recorder) = &self.recorder {
            recorder.token_operation(self.operation, outcome);
        }
    }
}

/// Where a response goes: its API, version and correlation id, and the operation's trace.
#[derive(Clone)]
struct Reply {
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    trace: TokenTrace,
}

impl Reply {
    fn of(key: ApiKey, request: &LocalRequest<'_>, trace: TokenTrace) -> Self {
        Self {
            key,
            version: request.header.api_version,
            correlation_id: request.header.correlation_id,
            trace,
        }
    }

    /// Answers with `body`, whose error code is `code`, and ends the operation's trace.
    fn send<T: kafka_protocol::protocol::Encodable>(&self, code: ErrorCode, body: &T) -> Effect {
        self.trace.finish(if code == ErrorCode::NONE {
            "success"
        } else {
            code.name()
        });
        super::encode(self.key, self.version, self.correlation_id, body)
    }
}

// ---- CreateDelegationToken ---------------------------------------------------------------------

impl DelegationTokenApis {
    fn create(&self, request: &LocalRequest<'_>, body: CreateBody, trace: TokenTrace) -> Effect {
        let reply = Reply::of(ApiKey::CreateDelegationToken, request, trace);
        let requester = request.session.principal.clone();
        let owner = match body.owner_name.as_deref() {
            Some(name) if !name.is_empty() => match body.owner_type {
                Some(kind) => Principal {
                    kind,
                    name: name.to_owned(),
                },
                // Kafka's KafkaPrincipal refuses a null type (NullPointerException, answered as
                // UNKNOWN_SERVER_ERROR).
                None => {
                    let no_type = Principal {
                        kind: String::new(),
                        name: name.to_owned(),
                    };
                    return reply.send(
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        &create_error(
                            ErrorCode::UNKNOWN_SERVER_ERROR,
                            &no_type,
                            &requester,
                            ERROR_TIMESTAMP,
                            reply.version,
                        ),
                    );
                }
            },
            _ => requester.clone(),
        };
        let refuse = |code: ErrorCode, timestamp: i64| {
            reply.send(
                code,
                &create_error(code, &owner, &requester, timestamp, reply.version),
            )
        };
        if !token_requests_allowed(request.session) {
            return refuse(
                ErrorCode::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                ERROR_TIMESTAMP,
            );
        }
        // Creating a token for someone else needs CreateTokens on User:<owner> (KIP-373). The
        // owner's type is not checked, as in Kafka.
        if owner != requester
            && !self.allowed(
                request,
                AclOperation::CreateTokens,
                ResourceType::User,
                &owner.to_string(),
            )
        {
            return refuse(
                ErrorCode::DELEGATION_TOKEN_AUTHORIZATION_FAILED,
                ERROR_TIMESTAMP,
            );
        }
        if body.renewers.iter().any(|r| r.kind != USER_TYPE) {
            return refuse(ErrorCode::INVALID_PRINCIPAL_TYPE, ERROR_TIMESTAMP);
        }
        // From here the controller's checks: its refusals leave the timestamps at 0.
        let Some(manager) = self.manager.clone() else {
            return refuse(ErrorCode::DELEGATION_TOKEN_AUTH_DISABLED, 0);
        };
        let create = CreateRequest {
            requester,
            owner,
            renewers: body.renewers.into_iter().map(principal).collect(),
            max_lifetime_ms: body.max_lifetime_ms,
        };
        create_token(manager, create, reply, request.now_ms)
    }
}

/// Decides on a token and persists it; on a conflict (another token took the id meanwhile) it
/// decides again.
fn create_token(
    manager: Arc<TokenManager>,
    create: CreateRequest,
    reply: Reply,
    now_ms: i64,
) -> Effect {
    let token = match manager.create(&create, now_ms) {
        Ok(token) => token,
        Err(code) => {
            return reply.send(
                code,
                &create_error(code, &create.owner, &create.requester, 0, reply.version),
            )
        }
    };
    reply.trace.token(&token.info.token_id, &token.info.owner);
    let batch = token.batch.clone();
    Effect::Persist(Persist::new(
        batch,
        move |stored: PersistOutcome, now| match stored {
            Ok(_) => reply.send(
                ErrorCode::NONE,
                &created(&token.info, &token.hmac, reply.version),
            ),
            Err(PersistError::Conflict) => create_token(manager, create, reply, now),
            Err(error) => {
                tracing::error!(?error, "storing a delegation token failed");
                reply.send(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    &create_error(
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        &create.owner,
                        &create.requester,
                        0,
                        reply.version,
                    ),
                )
            }
        },
    ))
}

fn principal(p: NamedPrincipal) -> Principal {
    Principal {
        kind: p.kind,
        name: p.name,
    }
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn create_error(
    code: ErrorCode,
    owner: &Principal,
    requester: &Principal,
    timestamp: i64,
    version: i16,
) -> CreateDelegationTokenResponse {
    let response = CreateDelegationTokenResponse::default()
        .with_error_code(code.0)
        .with_principal_type(text(&owner.kind))
        .with_principal_name(text(&owner.name))
        .with_issue_timestamp_ms(timestamp)
        .with_expiry_timestamp_ms(timestamp)
        .with_max_timestamp_ms(timestamp);
    with_requester(response, requester, version)
}

fn created(info: &TokenInfo, hmac: &[u8], version: i16) -> CreateDelegationTokenResponse {
    let response = CreateDelegationTokenResponse::default()
        .with_principal_type(text(&info.owner.kind))
        .with_principal_name(text(&info.owner.name))
        .with_issue_timestamp_ms(info.issue_ms)
        .with_expiry_timestamp_ms(info.expiry_ms)
        .with_max_timestamp_ms(info.max_ms)
        .with_token_id(text(&info.token_id))
        .with_hmac(Bytes::copy_from_slice(hmac));
    with_requester(response, &info.requester, version)
}

/// The requester fields exist from v3 (KIP-373).
fn with_requester(
    response: CreateDelegationTokenResponse,
    requester: &Principal,
    version: i16,
) -> CreateDelegationTokenResponse {
    if version >= 3 {
        response
            .with_token_requester_principal_type(text(&requester.kind))
            .with_token_requester_principal_name(text(&requester.name))
    } else {
        response
    }
}

// ---- Renew and Expire ------------------------------------------------------------------------

/// Renew or expire: the two APIs share their shape and their checks' structure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpiryOp {
    Renew,
    Expire,
}

impl DelegationTokenApis {
    fn renew_or_expire(
        &self,
        request: &LocalRequest<'_>,
        body: HmacBody,
        trace: TokenTrace,
    ) -> Effect {
        let (op, key) = if self.api_key == RENEW_DELEGATION_TOKEN {
            (ExpiryOp::Renew, ApiKey::RenewDelegationToken)
        } else {
            (ExpiryOp::Expire, ApiKey::ExpireDelegationToken)
        };
        let reply = Reply::of(key, request, trace);
        if !token_requests_allowed(request.session) {
            return expiry_answer(
                op,
                reply,
                ErrorCode::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                ERROR_TIMESTAMP,
            );
        }
        let Some(manager) = self.manager.clone() else {
            return expiry_answer(op, reply, ErrorCode::DELEGATION_TOKEN_AUTH_DISABLED, 0);
        };
        change_expiry(
            manager,
            op,
            request.session.principal.clone(),
            body,
            reply,
            request.now_ms,
        )
    }
}

/// Decides on a renew or expire and persists it; on a conflict (the token changed meanwhile) it
/// decides again on the new state.
fn change_expiry(
    manager: Arc<TokenManager>,
    op: ExpiryOp,
    principal: Principal,
    body: HmacBody,
    reply: Reply,
    now_ms: i64,
) -> Effect {
    let decided = match op {
        ExpiryOp::Renew => manager.renew(&principal, &body.hmac, body.period_ms, now_ms),
        ExpiryOp::Expire => manager.expire(&principal, &body.hmac, body.period_ms, now_ms),
    };
    let change = match decided {
        Ok(change) => change,
        // The controller's refusals leave the expiry at 0.
        Err(code) => return expiry_answer(op, reply, code, 0),
    };
    reply.trace.token(&change.token_id, &change.owner);
    let batch = change.batch.clone();
    Effect::Persist(Persist::new(
        batch,
        move |stored: PersistOutcome, now| match stored {
            Ok(_) => expiry_answer(op, reply, ErrorCode::NONE, change.expiry_ms),
            Err(PersistError::Conflict) => change_expiry(manager, op, principal, body, reply, now),
            Err(error) => {
                tracing::error!(?error, "storing a delegation token change failed");
                expiry_answer(op, reply, ErrorCode::UNKNOWN_SERVER_ERROR, 0)
            }
        },
    ))
}

fn expiry_answer(op: ExpiryOp, reply: Reply, code: ErrorCode, expiry_ms: i64) -> Effect {
    match op {
        ExpiryOp::Renew => reply.send(
            code,
            &RenewDelegationTokenResponse::default()
                .with_error_code(code.0)
                .with_expiry_timestamp_ms(expiry_ms),
        ),
        ExpiryOp::Expire => reply.send(
            code,
            &ExpireDelegationTokenResponse::default()
                .with_error_code(code.0)
                .with_expiry_timestamp_ms(expiry_ms),
        ),
    }
}

#[cfg(test)]
mod tests;
