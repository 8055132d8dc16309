//! Security counters (Kafka's per-listener authentication metrics), and the hook through which
//! the host's telemetry sees each counted event with its labels.
//!
//! The framework is sans-I/O: it only says *what* happened (an authentication with this mechanism
//! failed, a session expired). A [`SecurityRecorder`] installed by the host turns that into
//! OpenTelemetry instruments; the plain counters stay for [`SecurityMetrics::snapshot`] (tests,
//! and hosts without telemetry).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How an authentication ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuthOutcome {
    /// The client proved its identity.
    Success,
    /// The exchange failed (wrong credential, unknown user, unsupported mechanism, ...).
    Failure,
}

impl AuthOutcome {
    /// The attribute value (`success` / `failure`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuthOutcome::Success => "success",
            AuthOutcome::Failure => "failure",
        }
    }
}

/// Why the gateway closed an authenticated session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionClosed {
    /// The session outlived its lifetime without re-authenticating (KIP-368).
    Expired,
    /// Its credential was removed or changed.
    Revoked,
}

impl SessionClosed {
    /// The attribute value (`expired` / `revoked`).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionClosed::Expired => "expired",
            SessionClosed::Revoked => "revoked",
        }
    }
}

/// A delegation-token API call (KIP-48), as counted and traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TokenOperation {
    /// CreateDelegationToken.
    Create,
    /// RenewDelegationToken.
    Renew,
    /// ExpireDelegationToken.
    Expire,
    /// DescribeDelegationToken.
    Describe,
}

impl TokenOperation {
    /// The attribute value (`create` / `renew` / `expire` / `describe`).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenOperation::Create => "create",
            TokenOperation::Renew => "renew",
            TokenOperation::Expire => "expire",
            TokenOperation::Describe => "describe",
        }
    }
}

/// Receives every counted security event with its labels (the host's telemetry). Called on the
/// request path: implementations only bump instruments, they never block.
pub trait SecurityRecorder: Send + Sync {
    /// An authentication (`reauthentication`: KIP-368) ended. `mechanism` is `None` when the
    /// client named no mechanism the gateway knows.
    fn authentication(&self, mechanism: Option<&str>, reauthentication: bool, outcome: AuthOutcome);
    /// The gateway closed an authenticated session.
    fn session_closed(&self, reason: SessionClosed);
    /// A delegation-token API call was answered: `outcome` is `success` or the Kafka error name
    /// it was refused with (`DELEGATION_TOKEN_NOT_FOUND`, ...), or `malformed` when the request
    /// could not be read. A no-op unless the recorder counts tokens.
    fn token_operation(&self, operation: TokenOperation, outcome: &'static str) {
        let _ = (operation, outcome);
    }
}

/// Counters shared by every connection of a node.
#[derive(Default)]
pub struct SecurityMetrics {
    successful_authentication: AtomicU64,
    failed_authentication: AtomicU64,
    successful_reauthentication: AtomicU64,
    failed_reauthentication: AtomicU64,
    expired_connections_killed: AtomicU64,
    revoked_connections_closed: AtomicU64,
    recorder: Option<Arc<dyn SecurityRecorder>>,
}

impl fmt::Debug for SecurityMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecurityMetrics")
            .field("counters", &self.snapshot())
            .field("recorder", &self.recorder.is_some())
            .finish()
    }
}

/// A point-in-time copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// `successful-authentication-total`.
    pub successful_authentication: u64,
    /// `failed-authentication-total`.
    pub failed_authentication: u64,
    /// `successful-reauthentication-total`.
    pub successful_reauthentication: u64,
    /// `failed-reauthentication-total`.
    pub failed_reauthentication: u64,
    /// `expired-connections-killed-count`.
    pub expired_connections_killed: u64,
    /// Connections closed because their credential was removed or changed.
    pub revoked_connections_closed: u64,
}

impl SecurityMetrics {
    /// Counters that also report every event to `recorder`.
    pub fn with_recorder(recorder: Arc<dyn SecurityRecorder>) -> Self {
        Self {
            recorder: Some(recorder),
            ..Self::default()
        }
    }

    fn authentication(
        &self,
        counter: &AtomicU64,
        mechanism: Option<&str>,
        reauthentication: bool,
        outcome: AuthOutcome,
    ) {
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(recorder) = &self.recorder {
            recorder.authentication(mechanism, reauthentication, outcome);
        }
    }

    fn closed(&self, counter: &AtomicU64, reason: SessionClosed) {
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(recorder) = &self.recorder {
            recorder.session_closed(reason);
        }
    }

    /// Counts one successful authentication.
    pub fn successful_authentication(&self, mechanism: &str) {
        let c = &self.successful_authentication;
        self.authentication(c, Some(mechanism), false, AuthOutcome::Success);
    }
    /// Counts one failed authentication.
    pub fn failed_authentication(&self, mechanism: Option<&str>) {
        let c = &self.failed_authentication;
        self.authentication(c, mechanism, false, AuthOutcome::Failure);
    }
    /// Counts one successful re-authentication.
    pub fn successful_reauthentication(&self, mechanism: &str) {
        let c = &self.successful_reauthentication;
        self.authentication(c, Some(mechanism), true, AuthOutcome::Success);
    }
    /// Counts one failed re-authentication.
    pub fn failed_reauthentication(&self, mechanism: Option<&str>) {
        let c = &self.failed_reauthentication;
        self.authentication(c, mechanism, true, AuthOutcome::Failure);
    }
    /// Counts one session closed because it expired.
    pub fn expired_connections_killed(&self) {
        self.closed(&self.expired_connections_killed, SessionClosed::Expired);
    }
    /// Counts one session closed because its credential was revoked.
    pub fn revoked_connections_closed(&self) {
        self.closed(&self.revoked_connections_closed, SessionClosed::Revoked);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            successful_authentication: load(&self.successful_authentication),
            failed_authentication: load(&self.failed_authentication),
            successful_reauthentication: load(&self.successful_reauthentication),
            failed_reauthentication: load(&self.failed_reauthentication),
            expired_connections_killed: load(&self.expired_connections_killed),
            revoked_connections_closed: load(&self.revoked_connections_closed),
        }
    }
}
