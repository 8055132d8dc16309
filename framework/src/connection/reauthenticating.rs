//! [`Reauthenticating`]: the state of a session in the middle of re-authenticating, which both the
//! re-authentication's start and the exchange's steps build.

use super::session::Session;
use super::Authenticating;

/// A session in the middle of re-authenticating.
pub(crate) struct Reauthenticating {
    /// The session as it was; requests are not served until the exchange ends.
    pub(crate) previous: Session,
    pub(super) phase: Phase,
}

/// Where a re-authentication stands.
pub(super) enum Phase {
    /// The exchange runs.
    Exchange(Authenticating),
    /// The client asked for another enabled mechanism. Kafka answers the handshake with success
    /// and fails the next token, so that the failure is counted as a failed re-authentication.
    BadMechanism { requested: String },
}

impl Reauthenticating {
    pub(super) fn exchange(previous: Session, auth: Authenticating) -> Self {
        Self {
            previous,
            phase: Phase::Exchange(auth),
        }
    }

    /// Whether the next frame runs a mechanism step that may be expensive or block.
    pub(super) fn step_may_block(&self) -> bool {
        match &self.phase {
            Phase::Exchange(auth) => !auth.mechanism.steps_are_cheap(),
            Phase::BadMechanism { .. } => false,
        }
    }
}
