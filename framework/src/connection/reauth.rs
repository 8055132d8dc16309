//! Re-authentication of a live session (KIP-368, as Kafka ships it — kafka-security-semantics §2.3–§2.4).
//!
//! A SaslHandshake on a session that has an expiry, at least a second after the previous
//! (re-)authentication began, starts a re-authentication — even when the session has already
//! expired. The mechanism must stay the same and the principal must not change; either failure
//! closes the connection after the failure delay.

use bytes::Bytes;

use crate::protocol::header::RequestHeader;

use super::action::Action;
use super::close::CloseReason;
use super::delays::protocol_failure_delay;
use super::handshake::{self, Handshake};
use super::reauthenticating::{Phase, Reauthenticating};
use super::sasl_step;
use super::session::Session;
use super::transition::{fail_silently, respond_or_close, Transition};
use super::{Connection, State};

/// Kafka's `MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS`.
pub(crate) const MIN_REAUTH_INTERVAL_MS: i64 = 1_000;

/// Whether this SaslHandshake starts a re-authentication (otherwise Kafka's API layer answers it
/// with ILLEGAL_SASL_STATE).
pub(super) fn may_start(session: &Session, now_ms: i64) -> bool {
    session.expires_at_ms().is_some()
        && session
            .reauth_started_at_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= MIN_REAUTH_INTERVAL_MS)
}

/// Starts a re-authentication with the handshake in `frame`.
pub(super) fn start(
    conn: &Connection,
    session: Session,
    header: &RequestHeader,
    frame: &Bytes,
    now_ms: i64,
) -> Transition {
    let handshake: Handshake = match handshake::decode_handshake(header, frame) {
        Ok(h) => h,
        Err(reason) => return fail_silently(conn, CloseReason::InvalidRequest(reason)),
    };
    let Some(mechanism) = conn.config.services.mechanism(&handshake.mechanism) else {
        conn.config.services.metrics.failed_reauthentication(None);
        return handshake::unsupported_mechanism(conn, &handshake);
    };
    let mut previous = session;
    previous.reauth_started_at_ms = Some(now_ms);
    let response = handshake::handshake_ok(conn, &handshake);
    let phase = if mechanism.name() == previous.mechanism {
        Phase::Exchange(handshake::start_exchange(
            conn, mechanism, &handshake, now_ms, true,
        ))
    } else {
        Phase::BadMechanism {
            requested: handshake.mechanism,
        }
    };
    respond_or_close(
        State::Reauthenticating(Reauthenticating { previous, phase }),
        response,
    )
}

/// A frame while re-authenticating.
pub(super) fn on_frame(
    conn: &Connection,
    reauth: Reauthenticating,
    frame: Bytes,
    now_ms: i64,
) -> Transition {
    let Reauthenticating { previous, phase } = reauth;
    match phase {
        Phase::Exchange(auth) => {
            sasl_step::on_auth_frame(conn, auth, frame, now_ms, Some(previous))
        }
        Phase::BadMechanism { requested } => {
            conn.config
                .services
                .metrics
                .failed_reauthentication(Some(&requested));
            tracing::info!(
                client = %conn.client_address,
                "SASL mechanism '{requested}' requested by client is not supported for re-authentication of mechanism '{}'",
                previous.mechanism
            );
            conn.config
                .services
                .events
                .publish(crate::events::Event::AuthenticationFailed {
                    mechanism: Some(requested),
                    client_address: conn.client_address,
                    reason: "mechanism changed during re-authentication".into(),
                });
            (
                State::Failed,
                vec![Action::CloseAfter(protocol_failure_delay(conn))],
            )
        }
    }
}
