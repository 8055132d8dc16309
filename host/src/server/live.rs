//! What a configuration reload replaces on a running listener, as one immutable snapshot
//! (`Live`, behind an `ArcSwap`): the framework's `ConnectionConfig` (mechanisms and the rest of
//! the node's services, frame limits, failure throttle, re-authentication limits), the TLS
//! acceptor, and the per-connection time limits. A connection takes the snapshot when it is
//! accepted (the TLS handshake uses that snapshot's certificate), and its `Connection` takes a
//! fresh `ConnectionConfig` at each re-authentication (`LiveSource`). Established TLS sessions
//! keep the rustls configuration they were accepted with.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use portcullis::connection::{ConfigSource, ConnectionConfig, NodeServices};
use portcullis::protocol::versions::ApiVersionTable;
use portcullis::throttle::ThrottlePolicy;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::admission::Admission;
use super::tls::{self, TlsSetupError};
use super::ConnectionLimits;
use crate::config::Config;

/// The part of a listener's configuration a reload may replace.
pub(crate) struct Live {
    pub(crate) connection_config: Arc<ConnectionConfig>,
    pub(crate) tls: Option<TlsAcceptor>,
    pub(crate) limits: ConnectionLimits,
}

/// What is fixed for the life of the listener and goes into every [`Live`] built for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListenerFlags {
    /// The node shares its store with a cluster: mutations run on the writer.
    pub(crate) mutations_on_leader: bool,
    /// `delegated`: each new session is admitted by the host.
    pub(crate) admit_sessions: bool,
}

/// A TLS configuration could not be built from its files.
#[derive(Debug, thiserror::Error)]
pub enum LiveTlsError {
    /// `[listener.tls]`.
    #[error("listener.tls: {0}")]
    Listener(#[source] TlsSetupError),
    /// `[upstream.tls]`.
    #[error("upstream.tls: {0}")]
    Upstream(#[source] TlsSetupError),
}

/// The connector for the upstream brokers with `SSL` / `SASL_SSL` (`[upstream.tls]`, its
/// defaults when absent); `None` without TLS.
///
/// # Errors
/// A file is missing or unreadable, or rustls refuses the configuration.
pub fn upstream_connector(config: &Config) -> Result<Option<TlsConnector>, LiveTlsError> {
    if !config.upstream.security_protocol.uses_tls() {
        return Ok(None);
    }
    let settings = config.upstream.tls.clone().unwrap_or_default();
    tls::connector(&settings)
        .map(Some)
        .map_err(LiveTlsError::Upstream)
}

impl Live {
    /// The snapshot for `config` with `services`. The failure throttle of `previous` is kept
    /// (with its recent failures) when its policy did not change.
    pub(crate) fn build(
        config: &Config,
        services: Arc<NodeServices>,
        api_versions: Arc<ArcSwap<ApiVersionTable>>,
        flags: ListenerFlags,
        previous: Option<&Live>,
    ) -> Result<Self, LiveTlsError> {
        let tls = match &config.listener.tls {
            Some(settings) => Some(tls::acceptor(settings).map_err(LiveTlsError::Listener)?),
            None => None,
        };
        let listener = &config.listener;
        let limits = &config.limits;
        let throttle = ThrottlePolicy {
            base: Duration::from_millis(listener.failed_authentication_delay_ms),
            cap: Duration::from_millis(
                limits
                    .failed_authentication
                    .max_delay_ms
                    .max(listener.failed_authentication_delay_ms),
            ),
            free_failures: limits.failed_authentication.free_failures,
            half_life: Duration::from_millis(limits.failed_authentication.half_life_ms.max(1)),
        };
        let mut connection_config =
            ConnectionConfig::new(listener.name.clone(), services, api_versions)
                .with_frame_limits(listener.max_pre_auth_frame_bytes, listener.max_frame_bytes)
                .with_failure_throttle(throttle)
                .with_max_reauth_ms(Some(listener.connections_max_reauth_ms))
                .with_max_reauth_ms_by_mechanism(
                    listener.connections_max_reauth_ms_by_mechanism.clone(),
                )
                .with_mutations_on_leader(flags.mutations_on_leader)
                .with_session_admission(flags.admit_sessions);
        if let Some(previous) = previous {
            let kept = &previous.connection_config.failure_throttle;
            if *kept.policy() == throttle {
                connection_config.failure_throttle = Arc::clone(kept);
            }
        }
        Ok(Self {
            connection_config: Arc::new(connection_config),
            tls,
            limits: ConnectionLimits {
                authentication_timeout: Duration::from_millis(limits.authentication_timeout_ms),
                idle_timeout: Duration::from_millis(limits.connections_max_idle_ms),
                close_pause: Duration::from_millis(limits.close_pause_ms),
            },
        })
    }
}

/// The listener's current configuration, for connections that re-authenticate.
pub(crate) struct LiveSource(pub(crate) Arc<ArcSwap<Live>>);

impl ConfigSource for LiveSource {
    fn current(&self) -> Arc<ConnectionConfig> {
        Arc::clone(&self.0.load().connection_config)
    }
}

/// What a reload needs to change a running listener: its snapshot and its admission limits.
#[derive(Clone)]
pub struct ListenerHandle {
    live: Arc<ArcSwap<Live>>,
    admission: Arc<Admission>,
    upstream_tls: Arc<ArcSwapOption<TlsConnector>>,
    flags: ListenerFlags,
}

impl std::fmt::Debug for ListenerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerHandle").finish_non_exhaustive()
    }
}

impl ListenerHandle {
    pub(crate) fn new(
        live: Arc<ArcSwap<Live>>,
        admission: Arc<Admission>,
        upstream_tls: Arc<ArcSwapOption<TlsConnector>>,
        flags: ListenerFlags,
    ) -> Self {
        Self {
            live,
            admission,
            upstream_tls,
            flags,
        }
    }

    /// The services new connections get now.
    pub fn services(&self) -> Arc<NodeServices> {
        Arc::clone(&self.live.load().connection_config.services)
    }

    /// Builds everything `config` needs (reading the listener's and the upstream's TLS files
    /// again) and only then publishes it: new connections, re-authentications and new upstream
    /// connections use it from the moment this returns `Ok`; on an error nothing changed.
    ///
    /// # Errors
    /// The TLS configuration cannot be built (a file missing or unreadable, a key that does not
    /// match its certificate, no CA for client certificates).
    pub fn apply(&self, config: &Config, services: Arc<NodeServices>) -> Result<(), LiveTlsError> {
        let previous = self.live.load_full();
        let next = Live::build(
            config,
            services,
            Arc::clone(&previous.connection_config.api_versions),
            self.flags,
            Some(&previous),
        )?;
        let upstream_tls = upstream_connector(config)?;
        let limits = &config.limits;
        self.admission.set_limits(
            limits.max_connections,
            limits.max_connections_per_ip,
            limits.max_pre_auth_buffer_bytes,
        );
        self.live.store(Arc::new(next));
        self.upstream_tls.store(upstream_tls.map(Arc::new));
        Ok(())
    }
}
