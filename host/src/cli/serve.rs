//! `serve`: runs the node until it is stopped.

use std::io::{self};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

use crate::node::Node;
use crate::reload::Reloader;

use super::load::{load_config, warn_refused};

/// `serve`: logs to stderr (`RUST_LOG`, default `info`), builds the node and runs the server on
/// a multi-threaded runtime until it stops.
pub(super) fn serve(path: &Path) -> anyhow::Result<()> {
    let config = match load_config(path) {
        Ok(config) => config,
        Err(e) => {
            init_tracing();
            return Err(e);
        }
    };
    // Before the runtime: the OTLP exporters own their threads and blocking HTTP clients.
    let telemetry = crate::telemetry::init(&config.telemetry)?;
    let node = Node::build(config).context("cannot start the node")?;
    crate::telemetry::admin::set_store_replayed();
    warn_refused(&node.plugins);
    tracing::info!(
        node = node.config.node.id,
        address = %node.config.listener.address,
        mechanisms = ?node.services.mechanisms.iter().map(|m| m.name().to_owned()).collect::<Vec<_>>(),
        policy = node.services.policy.name(),
        credentials = node.credentials.users().len(),
        "node assembled"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let node = Arc::new(node);
    let admin = node.config.telemetry.prometheus_address.clone();
    let served = runtime.block_on(async {
        if let Some(address) = admin {
            crate::telemetry::admin::serve(&address, telemetry.prometheus.clone()).await?;
        }
        // A node of a cluster also serves its peers' forwarded mutations.
        let inter_node = match (&node.cluster, &node.config.cluster) {
            (Some(cluster), Some(config)) => Some((
                crate::cluster::listener::spawn(Arc::clone(cluster), config).await?,
                // The writer forgets applied requests once no retry can come.
                crate::cluster::idempotence::spawn_housekeeping(Arc::clone(cluster)),
            )),
            _ => None,
        };
        let reload_node = Arc::clone(&node);
        let served = crate::server::run_with(Arc::clone(&node), move |listener| {
            // Live reconfiguration (issue 23): SIGHUP, `POST /reload`, the TLS files' poll.
            let reloader = Arc::new(Reloader::new(reload_node, listener));
            crate::reload::spawn_sighup(Arc::clone(&reloader));
            if let Err(e) = crate::reload::spawn_file_poll(&reloader) {
                tracing::warn!(error = %e, "cannot watch the TLS files; reload with SIGHUP or `portcullis reload`");
            }
            tracing::info!(fingerprint = %reloader.fingerprint(), "configuration fingerprint");
            crate::telemetry::admin::set_reload_handler(reloader);
        })
        .await;
        if let Some((listener, housekeeping)) = inter_node {
            listener.abort();
            housekeeping.abort();
        }
        served
    });
    // Leave the election now, so another node takes over without waiting for the session
    // timeout.
    node.store.shutdown();
    node.shutdown_background();
    drop(runtime);
    telemetry.shutdown();
    served
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Fails only if a subscriber is already installed, which then keeps logging.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .try_init();
}
