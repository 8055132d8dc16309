//! [`Action`]: what the host must do next, and [`Forwarded`], a request to send upstream.

use std::time::Duration;

use bytes::Bytes;

use super::close::CloseReason;
use crate::authorization::ResponsePlan;
use crate::principal::Principal;

/// What the host must do next, in order.
#[derive(Debug)]
#[must_use]
pub enum Action {
    /// Write this frame to the client (the host adds the 4-byte size prefix). It takes its place
    /// in the response order behind every earlier forwarded request.
    Respond(Bytes),
    /// A local handler's write: append the batch to the metadata store (off the request path),
    /// then [`Persist::complete`](crate::local::Persist::complete) it with the outcome and carry
    /// out the [`Effect`](crate::local::Effect) it returns — a response that takes this request's
    /// place in the response order, a close, or another persist.
    Persist(crate::local::Persist),
    /// Forward the client's frame unchanged to the upstream broker this connection targets.
    Forward(Forwarded),
    /// Wait this long, then write what is queued and close (a failed authentication). Like Kafka,
    /// the answer itself is delayed, so a client cannot retry before the delay is over.
    CloseAfter(Duration),
    /// Close the connection now, without writing anything more.
    Close(CloseReason),
    /// Stop reading; deliver the responses to the requests already received (local and
    /// forwarded), then close. Kafka processes one request at a time per connection, so a request
    /// that arrives after a session expired is only read once every earlier one was answered.
    CloseAfterInFlight(CloseReason),
    /// A first authentication completed for this principal (only with
    /// [`ConnectionConfig::with_session_admission`]): the host does what the session needs, then
    /// calls [`Connection::admitted`] with its verdict and carries out the actions it returns
    /// (the answer to the client). No frame may be handed to the connection meanwhile.
    ///
    /// [`ConnectionConfig::with_session_admission`]: super::ConnectionConfig::with_session_admission
    /// [`Connection::admitted`]: super::Connection::admitted
    Admit(Principal),
}

/// Actions compare by content, except [`Action::Persist`], whose continuation cannot be compared:
/// a persist is never equal to anything (tests match it with a pattern instead).
impl PartialEq for Action {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Action::Respond(a), Action::Respond(b)) => a == b,
            (Action::Forward(a), Action::Forward(b)) => a == b,
            (Action::CloseAfter(a), Action::CloseAfter(b)) => a == b,
            (Action::Close(a), Action::Close(b)) => a == b,
            (Action::CloseAfterInFlight(a), Action::CloseAfterInFlight(b)) => a == b,
            (Action::Admit(a), Action::Admit(b)) => a == b,
            _ => false,
        }
    }
}

/// A request to forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarded {
    /// The API key (needed to rewrite the response).
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id.
    pub correlation_id: i32,
    /// Whether the upstream will answer (false for Produce with `acks=0`).
    pub expects_response: bool,
    /// The frame to send upstream: as the client sent it, or with the entries the authorizer
    /// denied spliced out.
    pub frame: Bytes,
    /// What the host must do with the upstream response before queueing it:
    /// `plan.apply(response_frame)` (skippable when `plan.is_unchanged()`); an error closes the
    /// client connection.
    pub plan: ResponsePlan,
    /// Who the upstream connection acts as (the forwarding policy's choice).
    pub identity: crate::forwarding::UpstreamIdentity,
}
