//! Session admission: a hook between a completed SASL exchange and the answer that tells the
//! client it is authenticated, for hosts that must do something for the new session before
//! serving it and must be able to refuse it with a message the client shows.
//!
//! Portcullis' `delegated` forwarding policy needs it: every upstream request of the session
//! goes out as the client's own principal with an upstream delegation token owned by it, so the
//! host obtains that token before the client is told it is in. If the upstream refuses (the
//! service principal lacks `CreateTokens`, tokens are disabled upstream), the authentication
//! fails with `SASL_AUTHENTICATION_FAILED` and the reason as its error message — what every
//! client shows to its user and treats as final — instead of a later request failing without
//! a message or the connection just closing.
//!
//! ```text
//! Authenticating ──exchange Complete──► Admitting ──admitted(Ok)──► Authenticated (success answer sent)
//!                                          └──────admitted(Err)──► Failed (error answer, delayed close)
//! ```
//!
//! Only first authentications are admitted: a re-authentication keeps its principal (KIP-368),
//! so whatever was done for the session still holds. While a connection is admitting, the host
//! must not feed it frames (it carries out actions in order before reading the next frame).

use std::time::Duration;

use bytes::Bytes;

use super::action::Action;
use super::close::CloseReason;
use super::delays::protocol_failure_delay;
use super::responses;
use super::session::Session;
use super::{Connection, State};
use crate::errors::ErrorCode;
use crate::events::Event;

/// A session whose authentication completed, waiting for the host's verdict.
pub(crate) struct Admitting {
    pub(super) session: Session,
    /// The answer that completes the authentication (with the server's final token).
    pub(super) success: Bytes,
    /// How a refusal reaches the client.
    pub(super) refusal: Refusal,
}

/// How a refused session is answered: SaslHandshake v0 carries raw tokens and cannot report a
/// failure on the wire.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    /// SaslAuthenticate at this version and correlation id.
    Framed { version: i16, correlation_id: i32 },
    /// Raw tokens: the connection is closed after the delay, without an answer.
    Raw,
}

/// The host refused a session it was asked to admit. `message` goes to the client as the failed
/// authentication's error message: it must name what is wrong and carry no secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct AdmissionRefused {
    /// What the client is told.
    pub message: String,
}

impl AdmissionRefused {
    /// A refusal that tells the client `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl Connection {
    /// The host's verdict on the session it was asked to admit ([`Action::Admit`]): `Ok` answers
    /// the client that it is authenticated; a refusal fails the authentication with
    /// `SASL_AUTHENTICATION_FAILED` and its message, then closes after Kafka's failure delay.
    pub fn admitted(&mut self, verdict: Result<(), AdmissionRefused>) -> Vec<Action> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let State::Admitting(admitting) = state else {
            // Not waiting for a verdict: a host defect. Keep the state, do nothing.
            self.state = state;
            return Vec::new();
        };
        match verdict {
            Ok(()) => {
                announce(self, &admitting.session);
                self.state = State::Authenticated(admitting.session);
                vec![Action::Respond(admitting.success)]
            }
            Err(refused) => self.refuse(admitting, refused.message),
        }
    }

    fn refuse(&mut self, admitting: Admitting, message: String) -> Vec<Action> {
        let Admitting {
            session, refusal, ..
        } = admitting;
        let config = &self.config;
        config
            .services
            .metrics
            .failed_authentication(Some(session.mechanism.as_str()));
        tracing::info!(client = %self.client_address, principal = %session.principal, reason = %message, "authentication refused by the host");
        config.services.events.publish(Event::AuthenticationFailed {
            mechanism: Some(session.mechanism.clone()),
            client_address: self.client_address,
            reason: message.clone(),
        });
        // The credential was right: the refusal is not counted by the guessing throttle.
        let delay: Duration = protocol_failure_delay(self);
        // Dropping the session unregisters its ticket from the scheduler.
        drop(session);
        self.state = State::Failed;
        match refusal {
            Refusal::Framed {
                version,
                correlation_id,
            } => match responses::authenticate(
                ErrorCode::SASL_AUTHENTICATION_FAILED,
                Some(message),
                Vec::new(),
                0,
                version,
                correlation_id,
            ) {
                Ok(frame) => vec![Action::Respond(frame), Action::CloseAfter(delay)],
                Err(e) => vec![Action::Close(CloseReason::InvalidRequest(e.into()))],
            },
            Refusal::Raw => vec![Action::CloseAfter(delay)],
        }
    }
}

/// A first authentication is complete and the session admitted: it counts as a successful
/// authentication and is published as `SessionAuthenticated`. Done here, once, rather than when
/// the exchange completes, so a session the host refuses counts only as the failure it is.
fn announce(conn: &Connection, session: &Session) {
    let services = &conn.config.services;
    services
        .metrics
        .successful_authentication(session.mechanism.as_str());
    services.events.publish(Event::SessionAuthenticated {
        principal: session.principal.clone(),
        mechanism: session.mechanism.clone(),
        client_address: conn.client_address,
        token_claims: session.token_claims.clone(),
    });
}

/// The state and action after a completed first authentication: straight to `Authenticated`
/// with the success answer, or (when the host admits sessions) `Admitting` with an
/// [`Action::Admit`].
pub(super) fn authenticated(
    conn: &Connection,
    session: Session,
    success: Bytes,
    refusal: Refusal,
) -> (State, Vec<Action>) {
    if !conn.config.admit_sessions {
        announce(conn, &session);
        return (
            State::Authenticated(session),
            vec![Action::Respond(success)],
        );
    }
    let principal = session.principal.clone();
    (
        State::Admitting(Admitting {
            session,
            success,
            refusal,
        }),
        vec![Action::Admit(principal)],
    )
}
