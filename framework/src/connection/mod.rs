//! The connection's security state machine, sans-I/O.
//!
//! The host reads a frame (the bytes after Kafka's 4-byte size prefix), hands it to
//! [`Connection::handle_frame`] with the current time, and carries out the returned [`Action`]s in
//! order. The connection never touches a socket or a clock.
//!
//! ```text
//! Initial ──ApiVersions──► VersionsSeen ──SaslHandshake──► Authenticating ──Complete──► Authenticated
//!    └────────────────SaslHandshake───────────────────────────┘     │    └──► Admitting ──┘ (host's verdict,
//!                                         Fail / bad request ──► Failed (close after the delay)   see `admission`)
//! ```

mod action;
mod admission;
pub use admission::AdmissionRefused;
mod authenticated;
mod close;
mod delays;
mod handshake;
pub(crate) mod limits;
mod pre_auth;
mod reauth;
mod reauthenticating;
pub(crate) mod request_error;
mod responses;
mod sasl_step;
mod services;
pub(crate) mod session;
mod source;
mod transition;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;

pub use action::{Action, Forwarded};
pub use close::{CloseReason, Disposition, IllegalState, LogLevel};
pub use limits::{DEFAULT_FAILED_AUTH_DELAY, DEFAULT_MAX_FRAME, DEFAULT_MAX_PRE_AUTH_FRAME};
pub use request_error::RequestError;
pub use services::NodeServices;
pub use session::{Session, FORWARDED_MECHANISM};
pub use source::ConfigSource;

use crate::principal::TlsPeer;
use crate::protocol::versions::ApiVersionTable;
use crate::reauth::SessionTicket;
use crate::sasl::{SaslExchange, SaslMechanism};
use crate::throttle::{FailureThrottle, ThrottlePolicy};

/// Everything a connection needs that is shared by all connections of a listener: the node's
/// services (held once, see [`NodeServices`]) and the listener's own settings.
#[non_exhaustive]
pub struct ConnectionConfig {
    /// The listener's name (for contexts and logs).
    pub listener: String,
    /// The node-wide services, shared with the node and every other listener.
    pub services: Arc<NodeServices>,
    /// The advertised API versions; the host updates it when the upstream changes.
    pub api_versions: Arc<ArcSwap<ApiVersionTable>>,
    /// Largest frame before authentication.
    pub max_pre_auth_frame: usize,
    /// Largest frame after authentication.
    pub max_frame: usize,
    /// How long a failed authentication waits before it is answered: Kafka's fixed delay, growing
    /// with the recent failures of the client's address and claimed user name.
    pub failure_throttle: Arc<FailureThrottle>,
    /// `connections.max.reauth.ms`, if set (> 0).
    pub max_reauth_ms: Option<i64>,
    /// Per-mechanism `connections.max.reauth.ms` overrides (Kafka's `<mech>.connections.max.reauth.ms`).
    pub max_reauth_ms_by_mechanism: std::collections::BTreeMap<String, i64>,
    /// The node shares its metadata log with a cluster: the security mutations
    /// ([`crate::envelope::FORWARDABLE`]) are not decided here but handed to the host as
    /// [`crate::local::Persist::on_leader`], to run on the cluster's writer (KIP-590).
    pub mutations_on_leader: bool,
    /// The host admits each new session before the client is told it authenticated
    /// ([`Action::Admit`], [`Connection::admitted`]).
    pub admit_sessions: bool,
}

impl ConnectionConfig {
    /// A listener of the node with these services, with Kafka's defaults for the limits.
    pub fn new(
        listener: impl Into<String>,
        services: Arc<NodeServices>,
        api_versions: Arc<ArcSwap<ApiVersionTable>>,
    ) -> Self {
        Self {
            listener: listener.into(),
            services,
            api_versions,
            max_pre_auth_frame: DEFAULT_MAX_PRE_AUTH_FRAME,
            max_frame: DEFAULT_MAX_FRAME,
            failure_throttle: Arc::new(FailureThrottle::default()),
            max_reauth_ms: None,
            max_reauth_ms_by_mechanism: std::collections::BTreeMap::new(),
            mutations_on_leader: false,
            admit_sessions: false,
        }
    }

    /// Asks the host to admit every new session before the client is told it authenticated (see
    /// [`Action::Admit`]).
    pub fn with_session_admission(mut self, admit: bool) -> Self {
        self.admit_sessions = admit;
        self
    }

    /// Sends the security mutations to the cluster's writer (see
    /// [`ConnectionConfig::mutations_on_leader`]).
    pub fn with_mutations_on_leader(mut self, on_leader: bool) -> Self {
        self.mutations_on_leader = on_leader;
        self
    }

    /// Sets per-mechanism `connections.max.reauth.ms` overrides (values ≤ 0 disable re-authentication
    /// for that mechanism).
    pub fn with_max_reauth_ms_by_mechanism(
        mut self,
        overrides: std::collections::BTreeMap<String, i64>,
    ) -> Self {
        self.max_reauth_ms_by_mechanism = overrides;
        self
    }

    /// `connections.max.reauth.ms` for a mechanism: its override, else the listener's value.
    pub(crate) fn max_reauth_ms_for(&self, mechanism: &str) -> Option<i64> {
        match self.max_reauth_ms_by_mechanism.get(mechanism) {
            Some(v) => Some(*v).filter(|v| *v > 0),
            None => self.max_reauth_ms,
        }
    }

    /// Sets the frame limits.
    pub fn with_frame_limits(mut self, pre_auth: usize, authenticated: usize) -> Self {
        self.max_pre_auth_frame = pre_auth;
        self.max_frame = authenticated;
        self
    }

    /// Sets the base delay of a failed authentication (Kafka's
    /// `connection.failed.authentication.delay.ms`), keeping the rest of the throttle policy.
    pub fn with_failed_auth_delay(self, delay: Duration) -> Self {
        let policy = ThrottlePolicy {
            base: delay,
            cap: self.failure_throttle.policy().cap.max(delay),
            ..*self.failure_throttle.policy()
        };
        self.with_failure_throttle(policy)
    }

    /// Sets how failed authentications are delayed (a fresh throttle: no failure counted yet).
    pub fn with_failure_throttle(mut self, policy: ThrottlePolicy) -> Self {
        self.failure_throttle = Arc::new(FailureThrottle::new(policy));
        self
    }

    /// Sets `connections.max.reauth.ms` (values ≤ 0 disable it).
    pub fn with_max_reauth_ms(mut self, max_reauth_ms: Option<i64>) -> Self {
        self.max_reauth_ms = max_reauth_ms.filter(|v| *v > 0);
        self
    }
}

impl std::fmt::Debug for ConnectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionConfig")
            .field("listener", &self.listener)
            .field("services", &self.services)
            .finish_non_exhaustive()
    }
}

/// One client connection's security state.
pub struct Connection {
    config: Arc<ConnectionConfig>,
    client_address: IpAddr,
    tls: bool,
    /// The TLS peer (its certificate chain), for the principal builder.
    tls_peer: Option<Arc<TlsPeer>>,
    /// Where a re-authentication takes its configuration; `None` keeps `config` for life.
    source: Option<Arc<dyn ConfigSource>>,
    state: State,
    /// The client's incremental fetch sessions (KIP-227) on this connection's upstream
    /// connection, which lives as long as this one: authorization covers what they hold.
    fetch_sessions: crate::authorization::FetchSessions,
}

enum State {
    /// Nothing received yet: ApiVersions or SaslHandshake may come first.
    Initial,
    /// ApiVersions answered: only SaslHandshake may follow.
    VersionsSeen,
    /// A mechanism was chosen and its exchange is running.
    Authenticating(Authenticating),
    /// Authenticated: requests are routed.
    Authenticated(Session),
    /// An authenticated session is re-authenticating (KIP-368).
    Reauthenticating(reauthenticating::Reauthenticating),
    /// The exchange completed; the host has not admitted the session yet.
    Admitting(admission::Admitting),
    /// Authentication failed or the client misbehaved; the connection is closing.
    Failed,
}

pub(crate) struct Authenticating {
    mechanism: Arc<dyn SaslMechanism>,
    exchange: Box<dyn SaslExchange>,
    framing: SaslFraming,
    /// When the handshake that started this exchange arrived (ms).
    started_at_ms: i64,
    /// The exchange's trace span (`sasl.authenticate`, docs/observability.md): opened by the
    /// handshake, closed when the exchange ends; disabled unless the host exports traces.
    span: tracing::Span,
}

/// How SASL tokens travel, fixed by the SaslHandshake version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SaslFraming {
    /// SaslHandshake v0: raw length-prefixed tokens, no Kafka header.
    Raw,
    /// SaslHandshake v1: tokens inside SaslAuthenticate requests.
    Framed,
}

impl Connection {
    /// A new connection from `client_address`.
    pub fn new(config: Arc<ConnectionConfig>, client_address: IpAddr, tls: bool) -> Self {
        Self {
            config,
            client_address,
            tls,
            // Until the host says more, a TLS client is one that sent no certificate.
            tls_peer: tls.then(|| Arc::new(TlsPeer::default())),
            source: None,
            state: State::Initial,
            fetch_sessions: crate::authorization::FetchSessions::new(),
        }
    }

    /// Takes a fresh configuration from `source` at each re-authentication (see
    /// [`ConfigSource`]); the configuration given to [`Connection::new`] serves until then.
    pub fn with_config_source(mut self, source: Arc<dyn ConfigSource>) -> Self {
        self.source = Some(source);
        self
    }

    /// The configuration snapshot this connection uses now.
    pub fn config(&self) -> &Arc<ConnectionConfig> {
        &self.config
    }

    /// Sets what the TLS handshake learned about the client (the certificate chain it presented),
    /// which the principal builder receives. Without it, a TLS connection is one whose client sent
    /// no certificate; on a plaintext connection it is ignored.
    pub fn with_tls_peer(mut self, peer: Arc<TlsPeer>) -> Self {
        if self.tls {
            self.tls_peer = Some(peer);
        }
        self
    }

    /// The largest frame the host may read next: small until the client has authenticated.
    pub fn max_frame_size(&self) -> usize {
        match self.state {
            State::Authenticated(_) | State::Reauthenticating(_) => self.config.max_frame,
            _ => self.config.max_pre_auth_frame,
        }
    }

    /// The session, once authenticated (also while it re-authenticates).
    pub fn session(&self) -> Option<&Session> {
        match &self.state {
            State::Authenticated(session) => Some(session),
            State::Reauthenticating(reauth) => Some(&reauth.previous),
            _ => None,
        }
    }

    /// The client's fetch sessions on this connection (see [`crate::authorization::FetchSessions`]).
    pub fn fetch_sessions(&self) -> &crate::authorization::FetchSessions {
        &self.fetch_sessions
    }

    /// The session's ticket: the host awaits [`SessionTicket::revoked`] to close the connection at
    /// once when the session's credential is removed.
    pub fn ticket(&self) -> Option<Arc<SessionTicket>> {
        self.session().map(|s| Arc::clone(&s.ticket))
    }

    /// Whether the next frame is a token for a SASL mechanism whose steps may be expensive (PLAIN
    /// derives a key) or block (a plugin), see [`SaslMechanism::steps_are_cheap`]: the host then
    /// hands the frame to the connection off its async workers.
    pub fn next_step_may_block(&self) -> bool {
        match &self.state {
            State::Authenticating(auth) => !auth.mechanism.steps_are_cheap(),
            State::Reauthenticating(reauth) => reauth.step_may_block(),
            _ => false,
        }
    }

    /// Whether the client has authenticated (also while it re-authenticates).
    pub fn is_authenticated(&self) -> bool {
        self.session().is_some()
    }

    /// Whether the connection is closing and must not be fed more frames.
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed)
    }

    /// Handles a frame that was announced larger than [`Connection::max_frame_size`]: the host
    /// calls this instead of reading it.
    pub fn frame_too_large(&mut self, size: usize) -> Vec<Action> {
        let limit = self.max_frame_size();
        self.state = State::Failed;
        vec![Action::Close(CloseReason::FrameTooLarge { size, limit })]
    }

    /// Handles one frame received from the client.
    pub fn handle_frame(&mut self, frame: Bytes, now_ms: i64) -> Vec<Action> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let (next, actions) = match state {
            State::Initial => pre_auth::on_first_frames(self, frame, now_ms, true),
            State::VersionsSeen => pre_auth::on_first_frames(self, frame, now_ms, false),
            State::Authenticating(auth) => {
                sasl_step::on_auth_frame(self, auth, frame, now_ms, None)
            }
            State::Authenticated(session) => {
                // A handshake on a session starts a re-authentication: it runs under the
                // configuration of now (a mechanism removed since is refused, a new
                // `connections.max.reauth.ms` sets the next lifetime).
                if is_handshake(&frame) {
                    if let Some(source) = &self.source {
                        self.config = source.current();
                    }
                }
                authenticated::on_request(self, session, frame, now_ms)
            }
            State::Reauthenticating(reauth) => reauth::on_frame(self, reauth, frame, now_ms),
            // The host must wait for its own verdict before reading on: a defect, fail closed.
            State::Admitting(_) => (
                State::Failed,
                vec![Action::Close(IllegalState::AwaitingAdmission.into())],
            ),
            State::Failed => (
                State::Failed,
                vec![Action::Close(IllegalState::Closing.into())],
            ),
        };
        self.state = next;
        actions
    }
}

/// Whether a request frame is a SaslHandshake (its header starts with the API key).
fn is_handshake(frame: &[u8]) -> bool {
    matches!(frame.get(..2), Some(&[hi, lo]) if i16::from_be_bytes([hi, lo]) == crate::protocol::api::SASL_HANDSHAKE)
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Initial => "Initial",
            State::VersionsSeen => "VersionsSeen",
            State::Authenticating(_) => "Authenticating",
            State::Authenticated(_) => "Authenticated",
            State::Reauthenticating(_) => "Reauthenticating",
            State::Admitting(_) => "Admitting",
            State::Failed => "Failed",
        };
        f.debug_struct("Connection")
            .field("client", &self.client_address)
            .field("state", &state)
            .finish()
    }
}

#[cfg(test)]
mod tests;
