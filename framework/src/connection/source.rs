//! [`ConfigSource`]: where a connection takes a fresh configuration snapshot when a session
//! re-authenticates, so that a host that reloads its configuration applies the new rules
//! (enabled mechanisms, re-authentication limits) at each session's next re-authentication,
//! never in the middle of an exchange.

use std::sync::Arc;

use super::ConnectionConfig;

/// The listener's current configuration, as the host publishes it (for example from an
/// `ArcSwap` it replaces on reload). A connection holds one immutable snapshot at a time: the one
/// it started with, replaced by [`ConfigSource::current`] when a SaslHandshake arrives on an
/// authenticated session (the start of a KIP-368 re-authentication).
pub trait ConfigSource: Send + Sync {
    /// The configuration new connections and re-authentications use now.
    fn current(&self) -> Arc<ConnectionConfig>;
}
