//! One step of a running SASL exchange (first authentication or re-authentication): the token
//! to the mechanism, its outcome to the client, and a completed exchange turned into a session.

use bytes::Bytes;
use kafka_protocol::messages::SaslAuthenticateRequest;

use super::action::Action;
use super::admission::{self, Refusal};
use super::close::{CloseReason, IllegalState};
use super::delays::failure_delay;
use super::reauthenticating::Reauthenticating;
use super::responses;
use super::session::{group_principals, Session};
use super::transition::{fail_silently, respond_or_close, Transition};
use super::{Authenticating, Connection, SaslFraming, State};
use crate::credentials::CredentialId;
use crate::errors::ErrorCode;
use crate::events::Event;
use crate::principal::{AuthenticationContext, Principal};
use crate::protocol::api::SASL_AUTHENTICATE;
use crate::protocol::codec::decode_body;
use crate::protocol::header;
use crate::sasl::{AuthFailure, Authenticated, StepOutcome};

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
                groups: group_principals(done.token_claims.as_ref()),
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
                groups: group_principals(done.token_claims.as_ref()),
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
