//! The result of a step before authentication ([`Transition`]) and the two common ways to end
//! one: answer and move on, or close silently after the failure delay.

use bytes::Bytes;

use super::action::Action;
use super::close::CloseReason;
use super::delays::protocol_failure_delay;
use super::{Connection, State};

/// The next state and what the host must do.
pub(super) type Transition = (State, Vec<Action>);

/// Kafka's behaviour for a pre-authentication protocol violation: no response, the connection
/// closes after the failure delay.
pub(super) fn fail_silently(conn: &Connection, reason: CloseReason) -> Transition {
    tracing::debug!(client = %conn.client_address, ?reason, "closing unauthenticated connection");
    (
        State::Failed,
        vec![Action::CloseAfter(protocol_failure_delay(conn))],
    )
}

/// Answers with `response` and moves to `next`, or closes if the response cannot be encoded.
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
