//! The services every plugin gets ([`HostContext`]): logging, credential and token views, time,
//! metrics and spans.

use std::sync::Arc;

use portcullis::credentials::{CredentialView, NoCredentials, NoTokens, TokenView};
use portcullis::{Host, HostServices, Level, MetricKind};

use super::stats::PluginStats;
use crate::clock::now_ms;

/// What every plugin's services share: the node's credential and token views, and where plugin
/// metrics and subscriber counts are kept.
#[derive(Clone)]
pub struct HostContext {
    credentials: Arc<dyn CredentialView>,
    tokens: Arc<dyn TokenView>,
    stats: Arc<PluginStats>,
}

impl std::fmt::Debug for HostContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostContext").finish_non_exhaustive()
    }
}

impl HostContext {
    /// A context over the node's views.
    pub fn new(credentials: Arc<dyn CredentialView>, tokens: Arc<dyn TokenView>) -> Self {
        Self {
            credentials,
            tokens,
            stats: Arc::new(PluginStats::default()),
        }
    }

    /// A context without a store (`check-config`, `plugins`): no credential, no token.
    pub fn offline() -> Self {
        Self::new(Arc::new(NoCredentials), Arc::new(NoTokens))
    }

    /// The services of plugin `name`: its log lines carry its name.
    pub fn services_for(&self, name: &str) -> Arc<dyn HostServices> {
        Arc::new(PluginServices {
            plugin: name.to_owned(),
            context: self.clone(),
        })
    }

    /// [`HostContext::services_for`] as a built-in plugin receives it.
    pub fn host_for(&self, name: &str) -> Host {
        Host::new(self.services_for(name))
    }

    /// Where plugin metrics and subscriber counts are kept.
    pub fn stats(&self) -> &Arc<PluginStats> {
        &self.stats
    }
}

/// One plugin's services.
struct PluginServices {
    plugin: String,
    context: HostContext,
}

/// The `tracing` target of every plugin's log lines (filter with `RUST_LOG=portcullis::plugin=debug`).
const PLUGIN_TARGET: &str = "portcullis::plugin";

impl HostServices for PluginServices {
    fn log(&self, level: Level, message: &str) {
        let plugin = self.plugin.as_str();
        match level {
            Level::Error => tracing::error!(target: PLUGIN_TARGET, plugin, "{message}"),
            Level::Warn => tracing::warn!(target: PLUGIN_TARGET, plugin, "{message}"),
            Level::Info => tracing::info!(target: PLUGIN_TARGET, plugin, "{message}"),
            Level::Debug => tracing::debug!(target: PLUGIN_TARGET, plugin, "{message}"),
            _ => tracing::trace!(target: PLUGIN_TARGET, plugin, "{message}"),
        }
    }

    fn log_enabled(&self, level: Level) -> bool {
        match level {
            Level::Error => tracing::enabled!(target: PLUGIN_TARGET, tracing::Level::ERROR),
            Level::Warn => tracing::enabled!(target: PLUGIN_TARGET, tracing::Level::WARN),
            Level::Info => tracing::enabled!(target: PLUGIN_TARGET, tracing::Level::INFO),
            Level::Debug => tracing::enabled!(target: PLUGIN_TARGET, tracing::Level::DEBUG),
            _ => tracing::enabled!(target: PLUGIN_TARGET, tracing::Level::TRACE),
        }
    }

    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn credentials(&self) -> Arc<dyn CredentialView> {
        Arc::clone(&self.context.credentials)
    }

    fn tokens(&self) -> Arc<dyn TokenView> {
        Arc::clone(&self.context.tokens)
    }

    fn publish_metric(&self, kind: MetricKind, name: &str, value: f64) {
        self.context.stats.record(&self.plugin, kind, name, value);
    }

    fn span_enter(&self, name: &str) -> u64 {
        plugin_spans::enter(&self.plugin, name)
    }

    fn span_exit(&self, handle: u64) {
        plugin_spans::exit(handle);
    }
}

/// The spans plugins open through their services. A plugin is called synchronously on the
/// host's thread, so an open span lives on that thread's stack (entered, hence current: the
/// plugin's log lines and inner spans go under it) until the plugin closes it.
mod plugin_spans {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicU64, Ordering};

    use portcullis::telemetry::SPAN_TARGET;

    /// Spans open at once on one thread, at most: a plugin that never closes its spans cannot
    /// grow the stack without bound (further spans are refused: handle 0).
    const MAX_OPEN: usize = 32;

    static NEXT: AtomicU64 = AtomicU64::new(1);

    thread_local! {
        static OPEN: RefCell<Vec<(u64, tracing::span::EnteredSpan)>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn enter(plugin: &str, name: &str) -> u64 {
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            "plugin",
            otel.name = tracing::field::Empty,
            portcullis.plugin = plugin,
        );
        if span.is_disabled() {
            return 0;
        }
        span.record("otel.name", name);
        OPEN.with(|open| {
            let mut open = open.borrow_mut();
            if open.len() >= MAX_OPEN {
                return 0;
            }
            let handle = NEXT.fetch_add(1, Ordering::Relaxed);
            open.push((handle, span.entered()));
            handle
        })
    }

    /// Closes `handle` and whatever was opened inside it, innermost first; an unknown handle
    /// (closed already, or opened on another thread) changes nothing.
    pub(super) fn exit(handle: u64) {
        OPEN.with(|open| {
            let mut open = open.borrow_mut();
            if let Some(at) = open.iter().position(|(h, _)| *h == handle) {
                while open.len() > at {
                    drop(open.pop());
                }
            }
        });
    }
}
