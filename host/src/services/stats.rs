//! What plugins published (metrics) and how each event subscriber keeps up (its counts).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use portcullis::MetricKind;

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
    /// Records a metric plugin `plugin` published (non-finite values are ignored).
    pub(super) fn record(&self, plugin: &str, kind: MetricKind, name: &str, value: f64) {
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

    /// Keeps the counts of a subscriber that was started.
    pub(super) fn add_subscriber(&self, counts: SubscriberStats) {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(counts);
    }

    /// Forgets the counts of a subscriber that was replaced.
    pub(super) fn remove_subscriber(&self, counts: &SubscriberStats) {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|s| !Arc::ptr_eq(&s.delivered, &counts.delivered));
    }

    /// Every subscriber's counts.
    pub fn subscribers(&self) -> Vec<SubscriberStats> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
