//! The host's implementations of the framework's service traits: the SCRAM credential admin
//! over the metadata store, the audit log file, plugin metrics, and the services every
//! plugin gets ([`HostContext`]: logging, credential and token views, time, metrics), with the
//! threads that run event subscribers and the login module's credential refresh.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use portcullis::audit::AuditSink;
use portcullis::credentials::ScramMechanism;
use portcullis::credentials::{
    CredentialView, InMemoryCredentials, NoCredentials, NoTokens, TokenView,
};
use portcullis::events::{EventBus, EventSubscriber};
use portcullis::local::scram_credentials::{CredentialAdmin, CredentialChange};
use portcullis::store::MetadataRecord;
use portcullis::{Host, HostServices, Level, MetricKind};
use portcullis_plugin_scram::credential_from_salted_password;

/// KIP-554 changes turned into metadata records. The handler persists them through the store
/// writer; the node's view of the log (see `node.rs`) updates the in-memory credentials and
/// publishes `CredentialChanged`, which revokes the sessions that used a changed credential.
pub struct StoreCredentialAdmin {
    credentials: Arc<InMemoryCredentials>,
}

impl StoreCredentialAdmin {
    /// Creates the admin service over the node's credential view.
    pub fn new(credentials: Arc<InMemoryCredentials>) -> Self {
        Self { credentials }
    }
}

impl CredentialAdmin for StoreCredentialAdmin {
    fn list(&self) -> Vec<(String, ScramMechanism, u32)> {
        let mut users = self.credentials.users();
        users.sort();
        users
    }

    fn records(&self, changes: &[CredentialChange]) -> Vec<MetadataRecord> {
        changes
            .iter()
            .filter_map(|change| match change {
                CredentialChange::Upsert {
                    user,
                    mechanism,
                    iterations,
                    salt,
                    salted_password,
                } => {
                    let credential = credential_from_salted_password(
                        *mechanism,
                        salted_password,
                        salt,
                        *iterations,
                    );
                    // The same credential again (a request retried after its first answer was
                    // lost, e.g. by a forwarding node whose writer died) changes nothing: no
                    // record, so that a mutation is never applied twice.
                    let unchanged = self
                        .credentials
                        .scram(user, *mechanism)
                        .is_some_and(|current| current == credential);
                    (!unchanged).then(|| MetadataRecord::ScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                        credential,
                    })
                }
                CredentialChange::Delete { user, mechanism } => {
                    Some(MetadataRecord::RemoveScramCredential {
                        user: user.clone(),
                        mechanism: *mechanism,
                    })
                }
                _ => None,
            })
            .collect()
    }
}

/// Appends audit lines to a file from a writer thread, so the request path never waits for the
/// disk. Lines that do not fit in the queue are counted and reported, never silently lost.
pub struct FileAuditSink {
    sender: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

impl FileAuditSink {
    /// Opens (appending) `path` and starts the writer thread.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (sender, receiver) = sync_channel::<String>(65_536);
        let dropped = Arc::new(AtomicU64::new(0));
        let reported = Arc::clone(&dropped);
        std::thread::Builder::new()
            .name("portcullis-audit".into())
            .spawn(move || {
                let mut out = BufWriter::new(file);
                let mut last_reported = 0;
                while let Ok(line) = receiver.recv() {
                    let _ = writeln!(out, "{line}");
                    // Flush when the queue is drained, so the file is current without a write per line.
                    while let Ok(line) = receiver.try_recv() {
                        let _ = writeln!(out, "{line}");
                    }
                    let _ = out.flush();
                    let now = reported.load(Ordering::Relaxed);
                    if now != last_reported {
                        tracing::warn!(dropped = now, "audit queue overflowed; lines were dropped");
                        last_reported = now;
                    }
                }
            })?;
        Ok(Self { sender, dropped })
    }
}

impl AuditSink for FileAuditSink {
    fn write_line(&self, line: String) {
        if let Err(TrySendError::Full(_)) = self.sender.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Refreshes the upstream login module's credential on Kafka's schedule (KIP-368 client side:
/// window factor 0.8, jitter 0.05, minimum period 60 s, buffer 300 s, 10 s retry). Credentials
/// that never expire (the built-in password login) schedule nothing. A refresh runs on the
/// blocking pool (a module may read a file or call a token endpoint); upstream connections use
/// the new credential from their next authentication or re-authentication on.
pub fn spawn_credential_refresh(
    login: Arc<dyn portcullis::login::LoginModule>,
    events: portcullis::events::EventBus,
) {
    use portcullis::refresh::{RefreshConfig, RefreshScheduler};
    let mut scheduler = RefreshScheduler::new(RefreshConfig::default(), events);
    scheduler.add(login, now_ms(), rand::random());
    if scheduler.poll_timeout().is_none() {
        tracing::debug!("the upstream credential never expires; nothing to refresh");
        return;
    }
    tokio::spawn(async move {
        while let Some(due) = scheduler.poll_timeout() {
            let wait = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let ran = tokio::task::spawn_blocking(move || {
                let refreshed = scheduler.on_timeout(now_ms(), rand::random);
                (scheduler, refreshed)
            })
            .await;
            match ran {
                Ok((returned, refreshed)) => {
                    scheduler = returned;
                    if refreshed > 0 {
                        tracing::info!(next_ms = ?scheduler.poll_timeout(), "upstream credential refreshed");
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "the credential refresh failed; no further refreshes");
                    return;
                }
            }
        }
    });
}

/// Milliseconds since the epoch: the time the host passes to the framework.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Runs the delegation-token sweep: once at start (tokens that expired while the node was down
/// go at once), then whenever [`TokenManager::poll_timeout`](portcullis::tokens::TokenManager)
/// says. Removals go through the store writer; a removal that loses a race with a renewal is
/// dropped (the next sweep decides again).
pub fn spawn_token_sweep(
    manager: Arc<portcullis::tokens::TokenManager>,
    writer: crate::store_writer::StoreWriter,
) {
    tokio::spawn(async move {
        let mut batches = manager.expired(now_ms());
        loop {
            for batch in batches {
                match writer.persist(batch).await {
                    // NotLeader: in a cluster, the writer sweeps (every node sees the removal).
                    Ok(_)
                    | Err(portcullis::local::PersistError::Conflict)
                    | Err(portcullis::local::PersistError::NotLeader) => {}
                    Err(e) => {
                        tracing::warn!(error = ?e, "sweeping an expired delegation token failed")
                    }
                }
            }
            let due = manager.poll_timeout();
            let wait = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            batches = manager.on_timeout(now_ms());
        }
    });
}

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

/// A published metric: a counter's sum, a gauge's last value, a histogram's count and sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct MetricValue {
    count: u64,
    value: f64,
}

/// What plugins published, and how each event subscriber keeps up; exported as the
/// `portcullis.plugin.metric` and `portcullis.event_subscriber.events` instruments
/// (`crate::telemetry::metrics::observe_plugin_stats`).
#[derive(Debug, Default)]
pub struct PluginStats {
    metrics: Mutex<BTreeMap<(String, String), (MetricKind, MetricValue)>>,
    subscribers: Mutex<Vec<SubscriberStats>>,
}

/// One subscriber's counts.
#[derive(Clone, Debug)]
pub struct SubscriberStats {
    /// The plugin.
    pub plugin: String,
    /// Events handed to it.
    pub delivered: Arc<AtomicU64>,
    /// Events dropped because its queue was full.
    pub dropped: Arc<AtomicU64>,
    /// Events it failed on (a panic).
    pub failed: Arc<AtomicU64>,
}

impl PluginStats {
    fn record(&self, plugin: &str, kind: MetricKind, name: &str, value: f64) {
        if !value.is_finite() {
            return;
        }
        let mut metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = metrics
            .entry((plugin.to_owned(), name.to_owned()))
            .or_insert((kind, MetricValue::default()));
        entry.0 = kind;
        entry.1.count += 1;
        match kind {
            MetricKind::Gauge => entry.1.value = value,
            _ => entry.1.value += value,
        }
    }

    /// Every published metric: plugin, name, kind, observations and value (a counter's or
    /// histogram's sum, a gauge's last).
    pub fn each_metric(&self, mut visit: impl FnMut(&str, &str, MetricKind, u64, f64)) {
        let metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        for ((plugin, name), (kind, value)) in metrics.iter() {
            visit(plugin, name, *kind, value.count, value.value);
        }
    }

    /// A published metric's current value (a counter's or histogram's sum, a gauge's last).
    pub fn metric(&self, plugin: &str, name: &str) -> Option<f64> {
        let metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        metrics
            .get(&(plugin.to_owned(), name.to_owned()))
            .map(|(_, v)| v.value)
    }

    /// The published metrics as JSON (`{plugin: {name: value}}`), for `portcullis plugins`-style dumps.
    pub fn metrics_json(&self) -> serde_json::Value {
        let metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = serde_json::Map::new();
        for ((plugin, name), (kind, value)) in metrics.iter() {
            let entry = out
                .entry(plugin.clone())
                .or_insert_with(|| serde_json::json!({}));
            let json = match kind {
                MetricKind::Histogram => {
                    serde_json::json!({"count": value.count, "sum": value.value})
                }
                _ => serde_json::json!(value.value),
            };
            if let Some(map) = entry.as_object_mut() {
                map.insert(name.clone(), json);
            }
        }
        serde_json::Value::Object(out)
    }

    /// Each subscriber's counts as JSON.
    pub fn subscribers_json(&self) -> serde_json::Value {
        let subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut out = serde_json::Map::new();
        for s in subscribers.iter() {
            out.insert(
                s.plugin.clone(),
                serde_json::json!({
                    "delivered": s.delivered.load(Ordering::Relaxed),
                    "dropped": s.dropped.load(Ordering::Relaxed),
                    "failed": s.failed.load(Ordering::Relaxed),
                }),
            );
        }
        serde_json::Value::Object(out)
    }

    /// Every subscriber's counts.
    pub fn subscribers(&self) -> Vec<SubscriberStats> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Delivers the bus's events to `subscriber` on a thread of its own, off the request path,
/// through a queue of `capacity` events: when the subscriber falls behind, the bus drops what does
/// not fit (counted in its stats, and logged once the subscriber catches up) and never waits.
///
/// # Errors
/// The thread cannot be started.
pub fn spawn_subscriber(
    plugin: &str,
    subscriber: Arc<dyn EventSubscriber>,
    events: &EventBus,
    capacity: usize,
    stats: &PluginStats,
) -> std::io::Result<SubscriberStats> {
    let subscription = events.subscribe(capacity);
    let counts = SubscriberStats {
        plugin: plugin.to_owned(),
        delivered: Arc::new(AtomicU64::new(0)),
        dropped: subscription.dropped_counter(),
        failed: Arc::new(AtomicU64::new(0)),
    };
    let thread_counts = counts.clone();
    std::thread::Builder::new()
        .name(format!("portcullis-events-{plugin}"))
        .spawn(move || {
            let counts = thread_counts;
            let mut reported_drops = 0;
            while let Some(event) = subscription.recv() {
                // A built-in subscriber's panic must not end delivery; a dynamic one's is
                // contained by the ABI already.
                if catch_unwind(AssertUnwindSafe(|| subscriber.on_event(&event))).is_err() {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                }
                counts.delivered.fetch_add(1, Ordering::Relaxed);
                let dropped = counts.dropped.load(Ordering::Relaxed);
                if dropped != reported_drops {
                    tracing::warn!(
                        plugin = %counts.plugin,
                        dropped,
                        "event subscriber fell behind; events were dropped for it"
                    );
                    reported_drops = dropped;
                }
            }
        })?;
    stats
        .subscribers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(counts.clone());
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use portcullis::events::Event;

    use super::*;

    fn event(i: u8) -> Event {
        Event::AuthenticationFailed {
            mechanism: None,
            client_address: IpAddr::from([10, 0, 0, i]),
            reason: "x".into(),
        }
    }

    /// Blocks in its first `on_event` until released, then records what it gets.
    struct Slow {
        entered: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
        seen: Mutex<Vec<Event>>,
    }

    impl EventSubscriber for Slow {
        fn on_event(&self, event: &Event) {
            let first = self.seen.lock().unwrap().is_empty();
            if first {
                let _ = self.entered.lock().unwrap().send(());
                let _ = self.release.lock().unwrap().recv();
            }
            self.seen.lock().unwrap().push(event.clone());
        }
    }

    #[test]
    fn a_slow_subscriber_loses_events_and_counts_them_but_never_blocks_publishing() {
        let bus = EventBus::new();
        let stats = PluginStats::default();
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let slow = Arc::new(Slow {
            entered: Mutex::new(entered_tx),
            release: Mutex::new(release_rx),
            seen: Mutex::new(Vec::new()),
        });
        let counts = spawn_subscriber("slow", slow.clone(), &bus, 4, &stats).unwrap();
        bus.publish(event(0));
        entered
            .recv_timeout(Duration::from_secs(30))
            .expect("the subscriber got the first event");
        // The subscriber is stuck: if publishing waited for it, this loop would never end.
        for i in 1..=200 {
            bus.publish(event(i));
        }
        assert_eq!(
            counts.dropped.load(Ordering::Relaxed),
            196,
            "4 fit in its queue"
        );
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while counts.delivered.load(Ordering::Relaxed) < 5 {
            assert!(
                Instant::now() < deadline,
                "the queued events were not delivered"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let seen = slow.seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            (0..=4).map(event).collect::<Vec<_>>(),
            "in order, the first ones"
        );
        let json = stats.subscribers_json();
        assert_eq!(json["slow"]["dropped"], 196);
        assert_eq!(json["slow"]["delivered"], 5);
    }

    /// A subscriber that panics on every event keeps being delivered to (a built-in one: the
    /// thread catches it; a dynamic one's panic is caught by the ABI already).
    #[test]
    fn a_panicking_subscriber_keeps_its_thread() {
        struct Panics;
        impl EventSubscriber for Panics {
            fn on_event(&self, _: &Event) {
                std::panic::panic_any("test: a subscriber panics");
            }
        }
        let bus = EventBus::new();
        let stats = PluginStats::default();
        let counts = spawn_subscriber("panics", Arc::new(Panics), &bus, 16, &stats).unwrap();
        for i in 0..3 {
            bus.publish(event(i));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while counts.delivered.load(Ordering::Relaxed) < 3 {
            assert!(Instant::now() < deadline, "delivery stopped");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(counts.failed.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn plugin_metrics_are_kept_per_plugin() {
        let context = HostContext::offline();
        let host = context.host_for("p");
        host.counter("requests", 2);
        host.counter("requests", 3);
        host.gauge("level", 7.0);
        host.gauge("level", 4.0);
        host.histogram("latency", 1.5);
        host.histogram("latency", 2.5);
        let stats = context.stats();
        assert_eq!(stats.metric("p", "requests"), Some(5.0));
        assert_eq!(stats.metric("p", "level"), Some(4.0));
        let json = stats.metrics_json();
        assert_eq!(json["p"]["latency"]["count"], 2);
        assert_eq!(json["p"]["latency"]["sum"], 4.0);
        assert_eq!(stats.metric("other", "requests"), None);
    }

    /// An upsert of the credential a user already has writes nothing: a request retried after
    /// its answer was lost (a forwarding node whose writer died) is not applied twice.
    #[test]
    fn an_unchanged_credential_needs_no_record() {
        let credentials = Arc::new(InMemoryCredentials::new());
        let admin = StoreCredentialAdmin::new(Arc::clone(&credentials));
        let upsert = |salt: &[u8]| CredentialChange::Upsert {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha256,
            iterations: 4096,
            salt: salt.to_vec(),
            salted_password: vec![7; 32],
        };
        let records = admin.records(&[upsert(b"salt-1")]);
        assert_eq!(records.len(), 1);
        if let MetadataRecord::ScramCredential { credential, .. } = &records[0] {
            credentials.upsert("alice", ScramMechanism::Sha256, credential.clone());
        }
        assert!(admin.records(&[upsert(b"salt-1")]).is_empty());
        assert_eq!(admin.records(&[upsert(b"salt-2")]).len(), 1);
    }
}
