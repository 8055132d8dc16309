//! Before authentication: ApiVersions, SaslHandshake and the SASL exchange. Nothing else is
//! accepted, and no other request body is parsed (CVE-2022-34917's lesson).

use bytes::Bytes;
use kafka_protocol::messages::{ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest};

use std::sync::Arc;
use std::time::Duration;

use super::admission::{self, Refusal};
use super::reauth::Reauthenticating;
use super::responses::{self, API_VERSIONS_MAX};
use super::{
    Action, Authenticating, CloseReason, Connection, IllegalState, RequestError, SaslFraming,
    Session, State,
};
use crate::credentials::CredentialId;
use crate::errors::ErrorCode;
use crate::events::Event;
use crate::principal::{AuthenticationContext, Principal};
use crate::protocol::api::{API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE};
use crate::protocol::codec::{decode_body, CodecError};
use crate::protocol::header::{self, RequestHeader};
use crate::sasl::{AuthFailure, Authenticated, ExchangeContext, SaslMechanism, StepOutcome};

type Transition = (State, Vec<Action>);

/// The first frames of a connection: ApiVersions (only as the very first request) and SaslHandshake.
pub(super) fn on_first_frames(
    conn: &Connection,
    frame: Bytes,
    now_ms: i64,
    first: bool,
) -> Transition {
    let (api_key, _, _) = match header::peek_ids(&frame) {
        Ok(ids) => ids,
        Err(e) => return fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    };
    match api_key {
        API_VERSIONS if first => api_versions(conn, &frame),
        // Kafka treats a second ApiVersions before the handshake as an internal illegal state and
        // closes at once, without a response.
        API_VERSIONS => (
            State::Failed,
            vec![Action::Close(IllegalState::SecondApiVersions.into())],
        ),
        SASL_HANDSHAKE => handshake(conn, &frame, now_ms),
        other => fail_silently(
            conn,
            IllegalState::DuringHandshake { api_key: other }.into(),
        ),
    }
}

fn api_versions(conn: &Connection, frame: &Bytes) -> Transition {
    let (_, version, correlation_id) = match header::peek_ids(frame) {
        Ok(ids) => ids,
        Err(e) => return fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    };
    if !(0..=API_VERSIONS_MAX).contains(&version) {
        // The client may retry with a version we support: stay in the initial state.
        return respond_or_close(
            State::Initial,
            responses::api_versions_unsupported(correlation_id),
        );
    }
    let parsed = header::parse(frame)
        .map_err(|e| e.to_string())
        .and_then(|h| {
            let body = frame.get(h.header_len..).unwrap_or_default();
            decode_body::<ApiVersionsRequest>("ApiVersions", body, version)
                .map_err(|e| e.to_string())
        });
    match parsed {
        Ok(_request) => {
            let table = conn.config.api_versions.load();
            respond_or_close(
                State::VersionsSeen,
                responses::api_versions(&table, version, correlation_id),
            )
        }
        Err(_) => respond_or_close(
            State::Initial,
            responses::api_versions_error(ErrorCode::INVALID_REQUEST, version, correlation_id),
        ),
    }
}

/// A decoded SaslHandshake.
pub(super) struct Handshake {
    pub(super) version: i16,
    pub(super) correlation_id: i32,
    pub(super) mechanism: String,
}

/// Decodes a SaslHandshake frame.
pub(super) fn decode_handshake(
    header: &RequestHeader,
    frame: &Bytes,
) -> Result<Handshake, RequestError> {
    let body = frame.get(header.header_len..).unwrap_or_default();
    let request = decode_body::<SaslHandshakeRequest>("SaslHandshake", body, header.api_version)?;
    Ok(Handshake {
        version: header.api_version,
        correlation_id: header.correlation_id,
        mechanism: request.mechanism.as_str().to_owned(),
    })
}

/// Answers a handshake for a mechanism that is not enabled: UNSUPPORTED_SASL_MECHANISM with the
/// enabled list, then a delayed close.
pub(super) fn unsupported_mechanism(conn: &Connection, handshake: &Handshake) -> Transition {
    conn.config
        .services
        .events
        .publish(Event::AuthenticationFailed {
            mechanism: None,
            client_address: conn.client_address,
            reason: "unsupported SASL mechanism".into(),
        });
    let enabled = conn.config.services.enabled_mechanism_names();
    let response = responses::handshake(
        ErrorCode::UNSUPPORTED_SASL_MECHANISM,
        &enabled,
        handshake.version,
        handshake.correlation_id,
    );
    match response {
        Ok(bytes) => (
            State::Failed,
            vec![
                Action::Respond(bytes),
                Action::CloseAfter(protocol_failure_delay(conn)),
            ],
        ),
        Err(e) => fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    }
}

/// Starts an exchange for an enabled mechanism.
pub(super) fn start_exchange(
    conn: &Connection,
    mechanism: Arc<dyn SaslMechanism>,
    handshake: &Handshake,
    now_ms: i64,
    reauthentication: bool,
) -> Authenticating {
    let context = ExchangeContext::new(conn.client_address, conn.config.listener.clone(), now_ms);
    let exchange = mechanism.start(&context);
    let framing = if handshake.version == 0 {
        SaslFraming::Raw
    } else {
        SaslFraming::Framed
    };
    let span = tracing::info_span!(
        target: crate::telemetry::SPAN_TARGET,
        "sasl.authenticate",
        sasl.mechanism = mechanism.name(),
        sasl.reauthentication = reauthentication,
        sasl.outcome = tracing::field::Empty,
        sasl.failure = tracing::field::Empty,
        enduser.id = tracing::field::Empty,
    );
    Authenticating {
        mechanism,
        exchange,
        framing,
        started_at_ms: now_ms,
        span,
    }
}

/// The successful handshake response.
pub(super) fn handshake_ok(conn: &Connection, handshake: &Handshake) -> Result<Bytes, CodecError> {
    responses::handshake(
        ErrorCode::NONE,
        &conn.config.services.enabled_mechanism_names(),
        handshake.version,
        handshake.correlation_id,
    )
}

fn handshake(conn: &Connection, frame: &Bytes, now_ms: i64) -> Transition {
    let handshake = match header::parse(frame)
        .map_err(RequestError::from)
        .and_then(|header| decode_handshake(&header, frame))
    {
        Ok(h) => h,
        Err(reason) => return fail_silently(conn, CloseReason::InvalidRequest(reason)),
    };
    let Some(mechanism) = conn.config.services.mechanism(&handshake.mechanism) else {
        return unsupported_mechanism(conn, &handshake);
    };
    let auth = start_exchange(conn, mechanism, &handshake, now_ms, false);
    respond_or_close(State::Authenticating(auth), handshake_ok(conn, &handshake))
}

/// A frame while the exchange runs. `previous` is the session being re-authenticated, if any.
pub(super) fn on_auth_frame(
    conn: &Connection,
    mut auth: Authenticating,
    frame: Bytes,
    now_ms: i64,
    previous: Option<Session>,
) -> Transition {
    match auth.framing {
        SaslFraming::Raw => {
            // SaslHandshake v0: the frame is the token, and failures cannot be reported on the wire.
            match auth.exchange.step(&frame) {
                StepOutcome::Continue(token) => (
                    continuing(auth, previous),
                    vec![Action::Respond(Bytes::from(token))],
                ),
                StepOutcome::Complete(done) => {
                    let final_token = Bytes::from(done.server_final.clone());
                    let first = previous.is_none();
                    match complete(conn, &auth, done, now_ms, previous) {
                        Ok(session) if first => {
                            admission::authenticated(conn, session, final_token, Refusal::Raw)
                        }
                        Ok(session) => (
                            State::Authenticated(session),
                            vec![Action::Respond(final_token)],
                        ),
                        Err(_) => (
                            State::Failed,
                            vec![Action::CloseAfter(failure_delay(
                                conn,
                                auth.exchange.claimed_user(),
                                now_ms,
                            ))],
                        ),
                    }
                }
                other => {
                    let failure = failure_of(other);
                    report_failure(conn, &auth, &failure, previous.is_some());
                    (
                        State::Failed,
                        vec![Action::CloseAfter(failure_delay(
                            conn,
                            auth.exchange.claimed_user(),
                            now_ms,
                        ))],
                    )
                }
            }
        }
        SaslFraming::Framed => framed_step(conn, auth, frame, now_ms, previous),
    }
}

/// The state while an exchange continues: a first authentication or a re-authentication.
fn continuing(auth: Authenticating, previous: Option<Session>) -> State {
    match previous {
        None => State::Authenticating(auth),
        Some(previous) => State::Reauthenticating(Reauthenticating::exchange(previous, auth)),
    }
}

fn framed_step(
    conn: &Connection,
    mut auth: Authenticating,
    frame: Bytes,
    now_ms: i64,
    previous: Option<Session>,
) -> Transition {
    let header = match header::parse(&frame) {
        Ok(h) => h,
        Err(e) => return fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    };
    if header.api_key != SASL_AUTHENTICATE {
        // Kafka answers that API with ILLEGAL_SASL_STATE; it needs the API's own error response,
        // which we cannot build without parsing a body we refuse to parse, so the connection is
        // closed after the failure delay instead.
        return fail_silently(
            conn,
            IllegalState::DuringAuthentication {
                api_key: header.api_key,
            }
            .into(),
        );
    }
    if !(0..=2).contains(&header.api_version) {
        return (
            State::Failed,
            vec![Action::Close(CloseReason::Unsupported {
                api_key: header.api_key,
                api_version: header.api_version,
            })],
        );
    }
    let body = frame.get(header.header_len..).unwrap_or_default();
    let request = match decode_body::<SaslAuthenticateRequest>(
        "SaslAuthenticate",
        body,
        header.api_version,
    ) {
        Ok(r) => r,
        Err(e) => return fail_silently(conn, CloseReason::InvalidRequest(e.into())),
    };
    let (version, correlation_id) = (header.api_version, header.correlation_id);
    let reauthentication = previous.is_some();
    let failed = |message: String, user: Option<&str>| {
        let response = responses::authenticate(
            ErrorCode::SASL_AUTHENTICATION_FAILED,
            Some(message),
            Vec::new(),
            0,
            version,
            correlation_id,
        );
        match response {
            Ok(bytes) => (
                State::Failed,
                vec![
                    Action::Respond(bytes),
                    Action::CloseAfter(failure_delay(conn, user, now_ms)),
                ],
            ),
            Err(e) => fail_silently(conn, CloseReason::InvalidRequest(e.into())),
        }
    };
    match auth.exchange.step(&request.auth_bytes) {
        StepOutcome::Continue(token) => {
            let response =
                responses::authenticate(ErrorCode::NONE, None, token, 0, version, correlation_id);
            respond_or_close(continuing(auth, previous), response)
        }
        StepOutcome::Complete(done) => {
            let final_token = done.server_final.clone();
            match complete(conn, &auth, done, now_ms, previous) {
                Ok(session) => {
                    let lifetime = session.lifetime_ms.unwrap_or(0);
                    let response = responses::authenticate(
                        ErrorCode::NONE,
                        None,
                        final_token,
                        lifetime,
                        version,
                        correlation_id,
                    );
                    match response {
                        Ok(success) if !reauthentication => admission::authenticated(
                            conn,
                            session,
                            success,
                            Refusal::Framed {
                                version,
                                correlation_id,
                            },
                        ),
                        response => respond_or_close(State::Authenticated(session), response),
                    }
                }
                Err(refused) => failed(refused.to_string(), auth.exchange.claimed_user()),
            }
        }
        other => {
            let failure = failure_of(other);
            report_failure(conn, &auth, &failure, reauthentication);
            failed(
                failure.client_message(auth.mechanism.name(), reauthentication),
                auth.exchange.claimed_user(),
            )
        }
    }
}

/// The failure a step reported; an outcome this framework does not know (the type is
/// non-exhaustive) fails the authentication too.
fn failure_of(outcome: StepOutcome) -> AuthFailure {
    match outcome {
        StepOutcome::Fail(failure) => failure,
        _ => AuthFailure::Hidden("the mechanism returned an unknown step outcome".to_owned()),
    }
}

/// KIP-368: the session lifetime is the smaller of `connections.max.reauth.ms` and the time left
/// on the credential, never negative; with neither, the session does not expire.
pub(crate) fn session_lifetime_ms(
    max_reauth_ms: Option<i64>,
    credential_expiry_ms: Option<i64>,
    now_ms: i64,
) -> Option<i64> {
    let remaining = credential_expiry_ms.map(|exp| exp.saturating_sub(now_ms));
    match (max_reauth_ms, remaining) {
        (Some(max), Some(left)) => Some(max.min(left).max(0)),
        (Some(max), None) => Some(max.max(0)),
        (None, Some(left)) => Some(left.max(0)),
        (None, None) => None,
    }
}

/// Why a completed exchange gives no session; its `Display` is the message for the client.
#[derive(Debug, thiserror::Error)]
enum SessionRefused {
    /// The principal builder named no principal: Kafka's generic message (the builder's reason
    /// was logged; it may tell more than a client should know).
    #[error("{client_message}")]
    NoPrincipal { client_message: String },
    /// A re-authentication named another principal: Kafka's exact wording, with `type.name`
    /// rather than the usual `type:name`.
    #[error(
        "Cannot change principals during re-authentication from {}.{}: {}.{}",
        from.kind, from.name, to.kind, to.name
    )]
    PrincipalChanged { from: Principal, to: Principal },
}

/// Turns a completed exchange into a session. A re-authentication must keep the principal
/// (Kafka compares type and name only).
fn complete(
    conn: &Connection,
    auth: &Authenticating,
    done: Authenticated,
    now_ms: i64,
    previous: Option<Session>,
) -> Result<Session, SessionRefused> {
    let mechanism = auth.mechanism.name().to_owned();
    let context = AuthenticationContext::sasl(
        &done,
        &mechanism,
        conn.client_address,
        &conn.config.listener,
    )
    .with_tls(conn.tls_peer.as_deref());
    let principal = match conn.config.services.principal_builder.build(&context) {
        Ok(principal) => principal,
        Err(error) => {
            // The exchange succeeded but no principal can be named: the authentication fails,
            // with Kafka's generic message (the reason may tell more than a client should know).
            let failure = AuthFailure::Hidden(format!("principal builder: {error}"));
            report_failure(conn, auth, &failure, previous.is_some());
            return Err(SessionRefused::NoPrincipal {
                client_message: failure.client_message(&mechanism, previous.is_some()),
            });
        }
    };
    let max_reauth_ms = conn.config.max_reauth_ms_for(&mechanism);
    let lifetime_ms = session_lifetime_ms(max_reauth_ms, done.credential_expiry_ms, now_ms);
    // A session of lifetime 0 (a credential that expired before the exchange ended, e.g. a
    // bearer token within the clock skew) is over at once: Kafka admits it and closes the
    // connection at its first request, which a millisecond clock would miss when that request
    // comes within the same millisecond (the check is `now > expiry`).
    let expires_at_ms = lifetime_ms.map(|l| match l {
        0 => now_ms.saturating_sub(1),
        l => now_ms.saturating_add(l),
    });
    let credential = credential_of(&done, &mechanism);
    let config = &conn.config;
    match previous {
        None => {
            let ticket = config.services.sessions.register(credential, expires_at_ms);
            // The exchange succeeded; the session is counted and announced when it is admitted
            // (admission::announce), so a session the host refuses is one failure, not both.
            crate::telemetry::sasl_succeeded(&auth.span, &principal);
            tracing::debug!(principal = %principal, mechanism = %mechanism, "authenticated");
            Ok(Session {
                principal,
                mechanism,
                authenticated_at_ms: now_ms,
                lifetime_ms,
                token_id: done.token_id,
                // Kafka counts the one-second limit from the previous *re*-authentication only, so
                // the first re-authentication may follow the login at once.
                reauth_started_at_ms: None,
                ticket,
                groups: super::group_principals(done.token_claims.as_ref()),
                token_claims: done.token_claims,
            })
        }
        Some(previous) if previous.principal != principal => {
            config
                .services
                .metrics
                .failed_reauthentication(Some(&mechanism));
            crate::telemetry::sasl_failed(&auth.span, "principal changed during re-authentication");
            let refused = SessionRefused::PrincipalChanged {
                from: previous.principal.clone(),
                to: principal,
            };
            tracing::info!(client = %conn.client_address, message = %refused, "re-authentication failed");
            config.services.events.publish(Event::AuthenticationFailed {
                mechanism: Some(mechanism),
                client_address: conn.client_address,
                reason: "principal changed during re-authentication".into(),
            });
            Err(refused)
        }
        Some(previous) => {
            config
                .services
                .sessions
                .renew(&previous.ticket, expires_at_ms, credential);
            config
                .services
                .metrics
                .successful_reauthentication(&mechanism);
            crate::telemetry::sasl_succeeded(&auth.span, &principal);
            config
                .services
                .events
                .publish(Event::SessionReauthenticated {
                    principal: principal.clone(),
                    mechanism: mechanism.clone(),
                    client_address: conn.client_address,
                    token_claims: done.token_claims.clone(),
                });
            tracing::debug!(principal = %principal, mechanism = %mechanism, ?lifetime_ms, "re-authenticated");
            Ok(Session {
                principal,
                mechanism,
                authenticated_at_ms: now_ms,
                lifetime_ms,
                // Like Kafka, the token flag follows the latest authentication; so do the groups
                // (a refreshed token may hold other groups; the principal may not change).
                token_id: done.token_id,
                reauth_started_at_ms: Some(auth.started_at_ms),
                ticket: previous.ticket,
                groups: super::group_principals(done.token_claims.as_ref()),
                token_claims: done.token_claims,
            })
        }
    }
}

/// What authenticated the client, as the mechanism reported it; a token id or the mechanism and
/// authorization id when it reported nothing.
fn credential_of(done: &Authenticated, mechanism: &str) -> CredentialId {
    match (&done.credential, &done.token_id) {
        (Some(credential), _) => credential.clone(),
        (None, Some(token_id)) => CredentialId::token(token_id.clone()),
        (None, None) => CredentialId::plugin(mechanism, done.authorization_id.clone()),
    }
}

fn report_failure(
    conn: &Connection,
    auth: &Authenticating,
    failure: &AuthFailure,
    reauthentication: bool,
) {
    if reauthentication {
        conn.config
            .services
            .metrics
            .failed_reauthentication(Some(auth.mechanism.name()));
    } else {
        conn.config
            .services
            .metrics
            .failed_authentication(Some(auth.mechanism.name()));
    }
    crate::telemetry::sasl_failed(&auth.span, failure.reason());
    tracing::info!(
        mechanism = auth.mechanism.name(),
        client = %conn.client_address,
        reason = failure.reason(),
        reauthentication,
        "authentication failed"
    );
    conn.config
        .services
        .events
        .publish(Event::AuthenticationFailed {
            mechanism: Some(auth.mechanism.name().to_owned()),
            client_address: conn.client_address,
            reason: failure.reason().to_owned(),
        });
}

/// Kafka's behaviour for a pre-authentication protocol violation: no response, the connection
/// closes after the failure delay.
pub(super) fn fail_silently(conn: &Connection, reason: CloseReason) -> Transition {
    tracing::debug!(client = %conn.client_address, ?reason, "closing unauthenticated connection");
    (
        State::Failed,
        vec![Action::CloseAfter(protocol_failure_delay(conn))],
    )
}

/// The delay of a failure that is no credential check (a protocol violation, an unsupported or
/// changed mechanism): Kafka's fixed delay. It is not counted by the throttle, which is there
/// for password guessing.
pub(super) fn protocol_failure_delay(conn: &Connection) -> Duration {
    conn.config.failure_throttle.policy().base
}

/// Counts a failed credential check and returns how long to wait before answering it (Kafka's
/// delay, growing with the recent failures of this address and of the claimed user name).
pub(super) fn failure_delay(conn: &Connection, user: Option<&str>, now_ms: i64) -> Duration {
    conn.config
        .failure_throttle
        .record_failure(conn.client_address, user, now_ms)
}

pub(super) fn respond_or_close(
    next: State,
    response: Result<Bytes, crate::protocol::codec::CodecError>,
) -> Transition {
    match response {
        Ok(bytes) => (next, vec![Action::Respond(bytes)]),
        Err(e) => (
            State::Failed,
            vec![Action::Close(CloseReason::InvalidRequest(e.into()))],
        ),
    }
}
