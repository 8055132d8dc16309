//! The threads that deliver the event bus's events to each event subscriber, and the running set
//! a configuration reload replaces.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use portcullis::events::{EventBus, EventSubscriber, Subscription, SubscriptionId};

use super::stats::{PluginStats, SubscriberStats};

/// A subscriber the node runs: its counts, and its subscription on the bus (to end it).
#[derive(Debug, Clone)]
pub struct RunningSubscriber {
    /// Its counts (also in the plugin stats while it runs).
    pub stats: SubscriberStats,
    id: SubscriptionId,
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
) -> std::io::Result<RunningSubscriber> {
    replace_subscribers(
        events,
        &[],
        vec![(plugin.to_owned(), subscriber, capacity)],
        stats,
    )
    .map(|mut started| started.remove(0))
}

/// Starts `new` (plugin name, subscriber, queue capacity) and ends `old` in one step on the bus
/// (each event goes to the old set or the new one: none lost, none twice). An old subscriber's
/// thread delivers what was queued for it, then ends.
///
/// # Errors
/// A thread cannot be started; then nothing was replaced.
pub fn replace_subscribers(
    events: &EventBus,
    old: &[RunningSubscriber],
    new: Vec<(String, Arc<dyn EventSubscriber>, usize)>,
    stats: &PluginStats,
) -> std::io::Result<Vec<RunningSubscriber>> {
    let mut registrations = Vec::with_capacity(new.len());
    let mut started = Vec::with_capacity(new.len());
    for (plugin, subscriber, capacity) in new {
        let (registration, subscription) = events.channel(capacity);
        let running = RunningSubscriber {
            stats: SubscriberStats {
                plugin,
                delivered: Arc::new(AtomicU64::new(0)),
                dropped: subscription.dropped_counter(),
                failed: Arc::new(AtomicU64::new(0)),
            },
            id: subscription.id(),
        };
        // A thread that cannot start leaves the threads started before it waiting on channels
        // nobody registered: dropping their registrations ends them.
        deliver(subscriber, subscription, running.stats.clone())?;
        registrations.push(registration);
        started.push(running);
    }
    let ended: Vec<SubscriptionId> = old.iter().map(|s| s.id).collect();
    events.replace(&ended, registrations);
    for s in old {
        stats.remove_subscriber(&s.stats);
    }
    for s in &started {
        stats.add_subscriber(s.stats.clone());
    }
    Ok(started)
}

fn deliver(
    subscriber: Arc<dyn EventSubscriber>,
    subscription: Subscription,
    counts: SubscriberStats,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("portcullis-events-{}", counts.plugin))
        .spawn(move || {
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
    Ok(())
}
