//! The threads that deliver the event bus's events to each event subscriber.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use portcullis::events::{EventBus, EventSubscriber};

use super::stats::{PluginStats, SubscriberStats};

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
    stats.add_subscriber(counts.clone());
    Ok(counts)
}
