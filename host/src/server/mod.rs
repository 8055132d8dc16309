//! The network runtime: listeners, one task per client connection driving the framework's
//! sans-I/O [`Connection`](portcullis::connection::Connection), upstream connections, and broker
//! address rewriting.
//!
//! | module               | its one job                                                         |
//! |----------------------|---------------------------------------------------------------------|
//! | [`frames`]           | Kafka's size-prefixed frames: reading (per-read size limit, read    |
//! |                      | sizes) and vectored writes                                          |
//! | [`sockets`]          | the two halves of a socket, plain TCP or TLS                        |
//! | [`tls`]              | rustls: the listener's server side, the upstream's client side      |
//! | [`live`]             | what a configuration reload replaces: one snapshot per listener     |
//! | [`admission`]        | connection limits and the pre-authentication buffer budget          |
//! | `listeners`          | accept loops: the bootstrap port and one port per upstream broker   |
//! | `client`             | a connection's request side: frames in, actions out, its phases     |
//! | `client_reads`       | reading a client's next request within the pre-auth budget          |
//! | `client_upstream`    | admitting a session, opening its upstream, forwarding on it         |
//! | `client_close`       | a connection's end: the drain, the lingering close, the log line    |
//! | `driver_error`       | why a connection failed (both sides' error)                         |
//! | `responses`          | a connection's response side (its own task): upstream responses     |
//! |                      | relayed as they arrive or rewritten, local answers, in order        |
//! | [`queue`]            | the ordered response queue joining the two sides                    |
//! | [`relay`]            | cutting the upstream's byte stream into responses (sans-I/O)        |
//! | [`splice`]           | the rest of a large relayed response moved socket to socket with    |
//! |                      | `splice(2)`, through a pipe, never copied into Portcullis           |
//! | [`upstream`]         | an upstream connection: opening it, its two halves for a client     |
//! | `upstream_error`     | why an upstream connection failed                                   |
//! | `upstream_calls`     | Portcullis' own requests: ids, versions, one round trip             |
//! | `upstream_sasl`      | logging in to the upstream (SASL) and when to log in again          |
//! | `upstream_reader`    | the upstream's read half, handed to the response side               |
//! | [`brokers`]          | the broker map and port arithmetic                                  |
//! | [`discovery`]        | asking the bootstrap servers for API versions and brokers           |
//! | [`rewrite`]          | broker addresses in Metadata / FindCoordinator / DescribeCluster    |
//! | [`delegated`]        | the `delegated` policy's upstream tokens: creation, renewal, expiry |
//! | `delegated_requests` | the token requests on the service connection                        |
//! | `delegated_error`    | why a principal's token could not be had                            |
//! | [`delegated_hook`]   | a session's upstream login with its token, and its lease            |
//! | [`wire`]             | kafka-protocol encoding and decoding for the host's own messages    |

pub mod admission;
pub mod brokers;
mod client;
mod client_close;
mod client_reads;
mod client_upstream;
pub mod delegated;
mod delegated_error;
pub mod delegated_hook;
mod delegated_requests;
pub mod discovery;
mod driver_error;
pub mod frames;
mod listeners;
pub mod live;
mod persist;
pub mod queue;
pub mod relay;
mod responses;
pub mod rewrite;
pub mod sockets;
pub mod splice;
pub mod tls;
pub mod upstream;
mod upstream_calls;
mod upstream_error;
mod upstream_reader;
mod upstream_sasl;
pub mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use portcullis::protocol::versions::ApiVersionTable;
use tokio::net::TcpSocket;
use tokio::sync::{watch, Semaphore};

use crate::node::Node;
use admission::Admission;
use brokers::BrokerMap;
use brokers::Target;
use discovery::discover;
use listeners::{accept_loop, BrokerListeners};
use rewrite::Advertised;
use upstream::UpstreamSettings;

/// How often the upstream's API versions and brokers are asked for again.
const REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// Pause between attempts while the upstream cannot be reached at start.
const DISCOVERY_RETRY: Duration = Duration::from_secs(2);
/// Connections the bootstrap listener's kernel queue holds while none can be accepted.
const LISTEN_BACKLOG: u32 = 1024;

/// State shared by every listener and connection of a server.
pub(crate) struct Shared {
    /// The listener's current configuration: connection config, TLS acceptor, time limits.
    live: Arc<ArcSwap<live::Live>>,
    upstream: UpstreamSettings,
    brokers: BrokerMap,
    advertised: Advertised,
    broker_listeners: BrokerListeners,
    shutdown: watch::Receiver<bool>,
    store_writer: crate::store_writer::StoreWriter,
    admission: Arc<Admission>,
    /// Permits to run a SASL step on the blocking pool (see `client::step_off_runtime`).
    sasl_workers: Arc<Semaphore>,
    /// The `delegated` policy's upstream tokens.
    delegated: Option<Arc<delegated::DelegatedUpstream>>,
}

/// The per-connection time limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    authentication_timeout: Duration,
    idle_timeout: Duration,
    close_pause: Duration,
}

/// A bound, not yet serving, Portcullis server. Its bootstrap port is reserved (bound) but
/// refuses connections until the upstream cluster has been discovered, so a client never waits
/// on a port that cannot serve it: it gets "connection refused" and retries, as with a broker
/// that is not up yet.
pub struct Server {
    shared: Arc<Shared>,
    /// What a configuration reload changes.
    handle: live::ListenerHandle,
    bootstrap: TcpSocket,
    stop: watch::Sender<bool>,
    grace: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("bootstrap", &self.local_addr())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Checks the node's configuration and binds the bootstrap listener (without listening
    /// yet). The connections share the node's services ([`Node::services`]); what is the
    /// listener's own (name, frame and re-authentication limits, failure throttle) comes from
    /// `[listener]` and `[limits]`.
    pub async fn bind(node: &Node) -> anyhow::Result<Self> {
        let config = &node.config;
        let protocol = config.upstream.security_protocol;
        let login = match (protocol.uses_sasl(), &node.upstream_login) {
            // The node's slot: a reload that changes the login stores the new module there.
            (true, Some(login)) => Some(Arc::clone(login)),
            (true, None) => anyhow::bail!(
                "[upstream] security_protocol = {} needs a login module (sasl_mechanism, username, password)",
                protocol.name()
            ),
            (false, _) => None,
        };
        if config.upstream.bootstrap_servers.is_empty() {
            anyhow::bail!("[upstream] bootstrap_servers is empty");
        }
        let upstream_tls = Arc::new(arc_swap::ArcSwapOption::from(
            live::upstream_connector(config)
                .context("[upstream.tls]")?
                .map(Arc::new),
        ));
        let listener = &config.listener;
        let limits = &config.limits;
        let api_versions = Arc::new(ArcSwap::from_pointee(ApiVersionTable::advertised(
            &ApiVersionTable::default(),
        )));
        let delegated = config.forwarding.delegated_settings().map(|settings| {
            let service = login
                .as_ref()
                .map(|l| l.load().module.credential().principal_name)
                .unwrap_or_else(|| "ANONYMOUS".to_owned());
            let delegated = delegated::DelegatedUpstream::new(settings.clone(), service);
            // A removed or changed credential expires that principal's upstream token at once.
            let subscription = node.services.events.subscribe(4_096);
            let revoker = Arc::clone(&delegated);
            let spawned = std::thread::Builder::new()
                .name("portcullis-delegated-revocation".into())
                .spawn(move || {
                    while let Some(event) = subscription.recv() {
                        if let portcullis::events::Event::CredentialChanged { user, .. } = event {
                            revoker.revoke(&portcullis::principal::Principal::user(user));
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the delegated-token revocation thread");
            }
            delegated
        });
        let flags = live::ListenerFlags {
            // A node sharing its store with a cluster (issue 13): mutations run on the writer.
            mutations_on_leader: node.writer.cluster().is_some(),
            // `delegated`: each new session's upstream token is obtained before the client is
            // told it authenticated, so a refusal fails the authentication with a message the
            // client shows (see `delegated::DelegatedUpstream::admit`).
            admit_sessions: delegated.is_some(),
        };
        let live = live::Live::build(
            config,
            Arc::clone(&node.services),
            api_versions,
            flags,
            None,
        )
        .context("[listener.tls]")?;

        let bootstrap = reserve_port(&listener.address)
            .with_context(|| format!("cannot listen on {}", listener.address))?;
        let local = bootstrap
            .local_addr()
            .context("bootstrap listener address")?;

        let (stop, shutdown) = watch::channel(false);
        let shared = Shared {
            live: Arc::new(ArcSwap::from_pointee(live)),
            upstream: UpstreamSettings {
                bootstrap_servers: config.upstream.bootstrap_servers.clone(),
                login,
                tls: Arc::clone(&upstream_tls),
                connect_timeout: Duration::from_millis(config.upstream.connect_timeout_ms),
                versions: ArcSwap::from_pointee(ApiVersionTable::default()),
            },
            brokers: BrokerMap::new(),
            advertised: Advertised {
                host: listener.advertised_host.clone(),
                port_base: listener.broker_port_base,
            },
            broker_listeners: BrokerListeners::new(local.ip(), listener.broker_port_base),
            shutdown,
            store_writer: node.writer.clone(),
            admission: Arc::new(Admission::new(
                limits.max_connections,
                limits.max_connections_per_ip,
                limits.max_pre_auth_buffer_bytes,
            )),
            sasl_workers: Arc::new(Semaphore::new(sasl_worker_count())),
            delegated,
        };
        let handle = live::ListenerHandle::new(
            Arc::clone(&shared.live),
            Arc::clone(&shared.admission),
            upstream_tls,
            flags,
        );
        Ok(Self {
            handle,
            shared: Arc::new(shared),
            bootstrap,
            stop,
            grace: Duration::from_millis(config.shutdown.grace_ms),
        })
    }

    /// The handle a configuration reload changes the listener through.
    pub fn listener_handle(&self) -> live::ListenerHandle {
        self.handle.clone()
    }

    /// The bootstrap listener's address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.bootstrap.local_addr().ok()
    }

    /// Discovers the upstream cluster, then serves clients until `shutdown` completes; then stops
    /// accepting, lets every connection answer what it already forwarded and close, and returns
    /// once all have closed or the grace period (`[shutdown] grace_ms`) is over.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self {
            shared,
            bootstrap,
            stop,
            grace,
            handle: _,
        } = self;
        tokio::pin!(shutdown);
        // The port accepts only once the upstream's versions are known: before that the
        // advertised table holds only the local APIs, and every forwarded request would fail.
        let upstream = shared.upstream.bootstrap_servers.join(", ");
        tracing::info!(upstream = %upstream, "discovering the upstream cluster before accepting clients");
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                discovered = refresh(&shared) => match discovered {
                    Ok(()) => {
                        crate::telemetry::admin::set_upstream_discovered();
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(upstream = %upstream, error = %e, "cannot reach the upstream cluster; clients are refused until it answers; retrying in {}s", DISCOVERY_RETRY.as_secs());
                        tokio::select! {
                            () = &mut shutdown => return Ok(()),
                            () = tokio::time::sleep(DISCOVERY_RETRY) => {}
                        }
                    }
                },
            }
        }
        let bootstrap = bootstrap
            .listen(LISTEN_BACKLOG)
            .context("cannot listen on the bootstrap address")?;
        let local = bootstrap
            .local_addr()
            .context("bootstrap listener address")?;
        let current = shared.live.load();
        tracing::info!(listener = %current.connection_config.listener, tls = current.tls.is_some(), "listening on {local}");
        drop(current);
        tokio::spawn(refresh_periodically(shared.clone()));
        if let Some(delegated) = &shared.delegated {
            tokio::spawn(delegated::run(
                Arc::clone(delegated),
                SharedUpstream(shared.clone()),
                shared.shutdown.clone(),
            ));
        }
        tokio::spawn(accept_loop(shared.clone(), bootstrap, Target::Bootstrap));
        shutdown.await;
        let open = shared.admission.live();
        tracing::info!(
            connections = open,
            grace_ms = grace.as_millis() as u64,
            "stopping: no new connections; answering what was already forwarded"
        );
        // Stops every accept loop; each connection stops reading requests, writes the answers to
        // what it forwarded and closes. A send error only means no receiver is left.
        let _ = stop.send(true);
        match tokio::time::timeout(grace, shared.admission.wait_until_empty()).await {
            Ok(()) => tracing::info!("stopped: every connection closed"),
            Err(_) => tracing::warn!(
                still_open = shared.admission.live(),
                "stopped: the grace period ended before every connection had closed"
            ),
        }
        if let Some(delegated) = &shared.delegated {
            delegated.shutdown(&shared.upstream, grace).await;
        }
        Ok(())
    }
}

/// The node's upstream settings, for tasks that hold the shared state.
struct SharedUpstream(Arc<Shared>);

impl std::ops::Deref for SharedUpstream {
    type Target = UpstreamSettings;
    fn deref(&self) -> &UpstreamSettings {
        &self.0.upstream
    }
}

/// Binds `address` without listening: the port is ours, and connecting to it is refused until
/// [`TcpSocket::listen`].
fn reserve_port(address: &str) -> anyhow::Result<TcpSocket> {
    let address: SocketAddr = address
        .parse()
        .with_context(|| format!("`{address}` is not IP:PORT"))?;
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std's listeners do: a restart does not wait for the previous run's TIME_WAIT sockets.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket)
}

/// Threads that may run SASL steps at once: all cores but one, so a storm of logins (PLAIN's
/// key derivation costs milliseconds) always leaves a core to the connections already served.
fn sasl_worker_count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .max(1)
}

/// Serves the node's listener until the process is asked to stop (Ctrl-C or SIGTERM).
pub async fn run(node: Arc<Node>) -> anyhow::Result<()> {
    run_with(node, |_| {}).await
}

/// [`run`], handing the bound listener's [`live::ListenerHandle`] to `on_bound` before it
/// serves (the configuration reload's way in).
pub async fn run_with(
    node: Arc<Node>,
    on_bound: impl FnOnce(live::ListenerHandle),
) -> anyhow::Result<()> {
    if let Some(login) = &node.upstream_login {
        crate::services::spawn_credential_refresh(
            &login.load_full(),
            node.services.events.clone(),
            &tokio::runtime::Handle::current(),
        );
    }
    if let Some(tokens) = &node.tokens {
        crate::services::spawn_token_sweep(tokens.clone(), node.writer.clone());
    }
    let server = Server::bind(&node).await?;
    on_bound(server.listener_handle());
    server.serve(stop_signal()).await
}

async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Asks the upstream for its API versions and brokers, publishes the advertised versions and
/// opens a listener for every broker.
async fn refresh(shared: &Arc<Shared>) -> Result<(), upstream::UpstreamError> {
    let discovery = discover(&shared.upstream).await?;
    let current = shared.live.load_full();
    let services = &current.connection_config.services;
    let local = services.local_handlers.iter().map(|h| {
        let (min, max) = h.versions();
        (h.api_key(), min, max)
    });
    let advertised = ApiVersionTable::advertised_with(&discovery.versions, local);
    // With an authorizer, only versions whose requests the authorization map can read are
    // advertised: a request Portcullis cannot check is never forwarded.
    let advertised = if services.authorizer.is_some() {
        portcullis::authorization::restrict_versions(&advertised)
    } else {
        advertised
    };
    tracing::debug!(
        upstream_apis = discovery.versions.len(),
        advertised_apis = advertised.len(),
        brokers = discovery.brokers.len(),
        "upstream discovered"
    );
    shared.upstream.versions.store(Arc::new(discovery.versions));
    // Every snapshot of the listener shares this one table (a reload keeps it).
    current
        .connection_config
        .api_versions
        .store(Arc::new(advertised));
    for (node_id, host, port) in discovery.brokers {
        shared.brokers.record(node_id, &host, port);
        shared.broker_listeners.ensure(shared, node_id);
    }
    Ok(())
}

async fn refresh_periodically(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(REFRESH_INTERVAL) => {}
        }
        if let Err(e) = refresh(&shared).await {
            tracing::warn!(error = %e, "refreshing upstream metadata failed; keeping the last known brokers");
        }
    }
}
