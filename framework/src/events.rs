//! The event bus: typed security events (defined in the plugin API) that plugins and services
//! subscribe to.
//!
//! Publishing never blocks: each subscriber has a bounded queue, and an event that does not fit
//! is dropped for that subscriber and counted, so a slow subscriber cannot stall authentication.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};

pub use portcullis_plugin_api::events::*;

/// A subscription: read events with [`Subscription::try_recv`] or [`Subscription::recv`].
#[derive(Debug)]
pub struct Subscription {
    receiver: Receiver<Event>,
    dropped: Arc<AtomicU64>,
    id: SubscriptionId,
}

/// Names a subscription on its bus, to end it with [`EventBus::replace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u64);

/// The bus's end of a subscription made with [`EventBus::channel`], not receiving events until it
/// is registered with [`EventBus::replace`].
#[derive(Debug)]
pub struct Registration {
    sender: SyncSender<Event>,
    dropped: Arc<AtomicU64>,
    id: SubscriptionId,
}

impl Subscription {
    /// This subscription's id.
    pub fn id(&self) -> SubscriptionId {
        self.id
    }
    /// How many events this subscription lost because its queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    /// A shared handle on [`Subscription::dropped`], for whoever reports it.
    pub fn dropped_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.dropped)
    }
    /// The next event, if one is queued.
    pub fn try_recv(&self) -> Option<Event> {
        self.receiver.try_recv().ok()
    }
    /// Waits for the next event; `None` when the bus is gone or dropped this subscription (the
    /// events queued before are still read first).
    pub fn recv(&self) -> Option<Event> {
        self.receiver.recv().ok()
    }
}

/// Fan-out of [`Event`]s to every subscriber.
#[derive(Debug, Default, Clone)]
pub struct EventBus {
    inner: Arc<BusInner>,
}

#[derive(Debug, Default)]
struct BusInner {
    subscribers: Mutex<Vec<Registration>>,
    dropped: AtomicU64,
    next_id: AtomicU64,
}

impl EventBus {
    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Subscribes with a queue of `capacity` events.
    pub fn subscribe(&self, capacity: usize) -> Subscription {
        let (registration, subscription) = self.channel(capacity);
        self.replace(&[], vec![registration]);
        subscription
    }

    /// A subscription with a queue of `capacity` events that receives nothing until its
    /// [`Registration`] is passed to [`EventBus::replace`].
    pub fn channel(&self, capacity: usize) -> (Registration, Subscription) {
        let (sender, receiver) = sync_channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let id = SubscriptionId(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let registration = Registration {
            sender,
            dropped: Arc::clone(&dropped),
            id,
        };
        (
            registration,
            Subscription {
                receiver,
                dropped,
                id,
            },
        )
    }

    /// Ends the subscriptions `remove` and starts `add`, at once: every event published is
    /// delivered either to the old set or to the new one, never to both or neither (a
    /// configuration reload replacing the event subscribers). An ended subscription still reads
    /// what was queued for it, then [`Subscription::recv`] answers `None`.
    pub fn replace(&self, remove: &[SubscriptionId], add: Vec<Registration>) {
        let mut subscribers = self
            .inner
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|r| !remove.contains(&r.id));
        subscribers.extend(add);
    }

    /// Publishes an event to every subscriber without blocking.
    pub fn publish(&self, event: Event) {
        let mut subscribers = self
            .inner
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|r| match r.sender.try_send(event.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                r.dropped.fetch_add(1, Ordering::Relaxed);
                self.inner.dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
    }

    /// How many events were dropped because a subscriber's queue was full.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn failed() -> Event {
        Event::AuthenticationFailed {
            mechanism: None,
            client_address: IpAddr::from([127, 0, 0, 1]),
            reason: "x".into(),
        }
    }

    #[test]
    fn delivers_to_every_subscriber_and_never_blocks() {
        let bus = EventBus::new();
        let a = bus.subscribe(1);
        let b = bus.subscribe(8);
        bus.publish(failed());
        bus.publish(failed());
        assert_eq!(a.try_recv(), Some(failed()));
        assert_eq!(a.try_recv(), None);
        assert_eq!(bus.dropped(), 1);
        assert_eq!((a.dropped(), b.dropped()), (1, 0));
        assert!(b.try_recv().is_some() && b.try_recv().is_some());
    }

    #[test]
    fn replace_hands_every_event_to_exactly_one_set_and_ends_the_old_subscriptions() {
        let bus = EventBus::new();
        let old = bus.subscribe(8);
        bus.publish(failed());
        let (registration, new) = bus.channel(8);
        bus.publish(failed());
        assert_eq!(new.try_recv(), None, "not registered yet");
        bus.replace(&[old.id()], vec![registration]);
        bus.publish(failed());
        assert!(
            old.recv().is_some() && old.recv().is_some(),
            "queued before"
        );
        assert_eq!(old.recv(), None, "ended");
        assert_eq!(new.try_recv(), Some(failed()));
        assert_eq!(new.try_recv(), None);
    }

    #[test]
    fn forgets_dropped_subscribers() {
        let bus = EventBus::new();
        drop(bus.subscribe(1));
        bus.publish(failed());
        assert!(bus.inner.subscribers.lock().unwrap().is_empty());
    }
}
