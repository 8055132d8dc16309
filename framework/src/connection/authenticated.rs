//! After authentication: the local APIs are answered here, everything else is routed by the
//! forwarding policy.

use bytes::Bytes;

use super::action::{Action, Forwarded};
use super::close::CloseReason;
use super::request_error::RequestError;
use super::session::Session;
use super::{reauth, responses};
use super::{Connection, State};
use crate::authorization::{self, ResponsePlan, Verdict};
use crate::errors::ErrorCode;
use crate::events::Event;
use crate::forwarding::{RequestInfo, Route};
use crate::local::{Effect, LeaderRequest, LocalRequest, Persist};
use crate::protocol::api::{API_VERSIONS, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE};
use crate::protocol::header::RequestHeader;
use crate::protocol::{header, produce};

type Transition = (State, Vec<Action>);

pub(super) fn on_request(
    conn: &Connection,
    session: Session,
    frame: Bytes,
    now_ms: i64,
) -> Transition {
    // KIP-511: an ApiVersions newer than ours (Java clients send their latest after
    // authenticating) gets a v0 UNSUPPORTED_VERSION answer so the client retries with one we
    // speak. Its header cannot be parsed first: kafka-protocol refuses versions it does not know.
    if let Ok((API_VERSIONS, version, correlation_id)) = header::peek_ids(&frame) {
        if version > responses::API_VERSIONS_MAX {
            return respond(session, responses::api_versions_unsupported(correlation_id));
        }
    }
    let header = match header::parse(&frame) {
        Ok(h) => h,
        // Kafka closes a connection whose request it cannot parse.
        Err(e) => return close(CloseReason::InvalidRequest(e.into())),
    };
    if session.ticket.is_revoked() {
        conn.config.services.metrics.revoked_connections_closed();
        return close(CloseReason::CredentialRevoked);
    }
    // KIP-368: a handshake may start a re-authentication even on an expired session; any other
    // request on an expired session closes the connection silently.
    if header.api_key == SASL_HANDSHAKE && reauth::may_start(&session, now_ms) {
        return reauth::start(conn, session, &header, &frame, now_ms);
    }
    if session.ticket.is_expired(now_ms) {
        conn.config.services.metrics.expired_connections_killed();
        conn.config.services.events.publish(Event::SessionExpired {
            principal: session.principal.clone(),
            client_address: conn.client_address,
        });
        tracing::debug!(principal = %session.principal, client = %conn.client_address, "session expired; closing");
        return (
            State::Failed,
            vec![Action::CloseAfterInFlight(CloseReason::SessionExpired)],
        );
    }
    let (version, correlation_id) = (header.api_version, header.correlation_id);
    match header.api_key {
        API_VERSIONS => {
            let table = conn.config.api_versions.load();
            let response = if version > responses::API_VERSIONS_MAX {
                responses::api_versions_unsupported(correlation_id)
            } else {
                responses::api_versions(&table, version, correlation_id)
            };
            respond(session, response)
        }
        // A handshake that does not start a re-authentication (no session expiry, or within a
        // second of the previous one): Kafka's API layer answers ILLEGAL_SASL_STATE.
        SASL_HANDSHAKE => {
            let response = responses::handshake(
                ErrorCode::ILLEGAL_SASL_STATE,
                &[],
                version.min(1),
                correlation_id,
            );
            respond(session, response)
        }
        SASL_AUTHENTICATE => {
            let response = responses::authenticate(
                ErrorCode::ILLEGAL_SASL_STATE,
                Some("SaslAuthenticate request received after successful authentication".into()),
                Vec::new(),
                0,
                version.min(2),
                correlation_id,
            );
            respond(session, response)
        }
        _ => route(conn, session, &header, frame, now_ms),
    }
}

fn route(
    conn: &Connection,
    session: Session,
    header: &RequestHeader,
    frame: Bytes,
    now_ms: i64,
) -> Transition {
    let (api_key, version, correlation_id) =
        (header.api_key, header.api_version, header.correlation_id);
    let table = conn.config.api_versions.load();
    if !table.supports(api_key, version) {
        // Not advertised: a well-behaved client never sends it. Kafka closes the connection on a
        // request it cannot handle.
        return (
            State::Authenticated(session),
            vec![Action::Close(CloseReason::Unsupported {
                api_key,
                api_version: version,
            })],
        );
    }
    let decision =
        conn.config
            .services
            .policy
            .route(&RequestInfo::new(api_key, version, &session.principal));
    match decision {
        Route::Upstream { identity } => {
            let (frame, plan) = match &conn.config.services.authorizer {
                None => (frame, ResponsePlan::unchanged()),
                Some(authorizer) => match authorize(
                    conn,
                    &session,
                    authorizer,
                    header,
                    &frame,
                    Some(&conn.fetch_sessions),
                ) {
                    Verdict::Forward { frame, plan } => (frame, plan),
                    Verdict::Respond(bytes) => {
                        return (State::Authenticated(session), vec![Action::Respond(bytes)])
                    }
                    Verdict::Close(reason) => return close(CloseReason::InvalidRequest(reason)),
                },
            };
            let expects_response = if api_key == PRODUCE {
                produce::expects_response(
                    version,
                    frame.get(header.header_len..).unwrap_or_default(),
                )
            } else {
                true
            };
            let forwarded = Forwarded {
                api_key,
                api_version: version,
                correlation_id,
                expects_response,
                frame,
                plan,
                identity,
            };
            (
                State::Authenticated(session),
                vec![Action::Forward(forwarded)],
            )
        }
        // A node of a cluster sharing one log: the writer decides mutations on its view.
        Route::Local
            if conn.config.mutations_on_leader
                && crate::envelope::is_forwardable(api_key)
                && conn.config.services.local_handler(api_key).is_some() =>
        {
            let request = LeaderRequest::new(
                frame,
                header,
                session.forwarded_principal(),
                conn.client_address,
            );
            (
                State::Authenticated(session),
                vec![Action::Persist(Persist::on_leader(request))],
            )
        }
        Route::Local => match conn.config.services.local_handler(api_key) {
            Some(handler) => {
                let request = LocalRequest {
                    header,
                    body: frame.get(header.header_len..).unwrap_or_default(),
                    session: &session,
                    client_address: conn.client_address,
                    listener: &conn.config.listener,
                    now_ms,
                };
                match handler.handle(&request) {
                    Effect::Respond(bytes) => {
                        (State::Authenticated(session), vec![Action::Respond(bytes)])
                    }
                    Effect::Persist(persist) => (
                        State::Authenticated(session),
                        vec![Action::Persist(persist)],
                    ),
                    Effect::Close(reason) => close(CloseReason::InvalidRequest(reason)),
                }
            }
            None => close(CloseReason::Unsupported {
                api_key,
                api_version: header.api_version,
            }),
        },
        Route::Reject(code) => {
            tracing::info!(principal = %session.principal, api_key, code = %code, "request rejected by forwarding policy");
            // Answer as Kafka answers a request whose every resource is denied (per-topic
            // TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED…),
            // so clients report a refusal instead of retrying a dropped connection. An API the
            // authorization map cannot answer is closed.
            let refuse_all: std::sync::Arc<dyn crate::authorizer::Authorizer> = std::sync::Arc::new(
                crate::authorizer::FixedDecision(crate::authorizer::Decision::Denied),
            );
            match authorize(conn, &session, &refuse_all, header, &frame, None) {
                Verdict::Respond(bytes) => {
                    (State::Authenticated(session), vec![Action::Respond(bytes)])
                }
                _ => (
                    State::Authenticated(session),
                    vec![Action::Close(
                        RequestError::RejectedByPolicy { api_key, code }.into(),
                    )],
                ),
            }
        }
        _ => (
            State::Authenticated(session),
            vec![Action::Close(CloseReason::Unsupported {
                api_key,
                api_version: version,
            })],
        ),
    }
}

/// Authorization of an upstream-bound request (kept apart from routing; see
/// [`crate::authorization`]).
fn authorize(
    conn: &Connection,
    session: &Session,
    authorizer: &std::sync::Arc<dyn crate::authorizer::Authorizer>,
    header: &RequestHeader,
    frame: &Bytes,
    fetch_sessions: Option<&authorization::FetchSessions>,
) -> Verdict {
    // Borrowed from the session (principal, groups, token facts) and the header: nothing is
    // allocated per request.
    let context = session
        .request_context(
            conn.client_address,
            conn.config.listener.as_str(),
            header.api_key,
            header.api_version,
            header.correlation_id,
        )
        .with_client_id(header.client_id.as_deref());
    match fetch_sessions {
        Some(sessions) => {
            authorization::enforce_verdict_in(authorizer, &context, header, frame, sessions)
        }
        None => authorization::enforce_verdict(authorizer, &context, header, frame),
    }
}

fn respond(
    session: Session,
    response: Result<Bytes, crate::protocol::codec::CodecError>,
) -> Transition {
    match response {
        Ok(bytes) => (State::Authenticated(session), vec![Action::Respond(bytes)]),
        Err(e) => close(CloseReason::InvalidRequest(e.into())),
    }
}

fn close(reason: CloseReason) -> Transition {
    (State::Failed, vec![Action::Close(reason)])
}
