//! The event bus: typed security events that plugins and services subscribe to.
//!
//! Publishing never blocks: each subscriber has a bounded queue, and an event that does not fit
//! is dropped for that subscriber and counted, so a slow subscriber cannot stall authentication.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};

use crate::credentials::CredentialId;
use crate::principal::Principal;

/// A security event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A client authenticated.
    SessionAuthenticated {
        /// The session's principal.
        principal: Principal,
        /// The mechanism used.
        mechanism: String,
        /// The client's address.
        client_address: IpAddr,
    },
    /// A client failed to authenticate. Never carries the secret or the reason's details.
    AuthenticationFailed {
        /// The mechanism tried, if the handshake got that far.
        mechanism: Option<String>,
        /// The client's address.
        client_address: IpAddr,
        /// The reason, safe to log.
        reason: String,
    },
    /// A client re-authenticated (KIP-368).
    SessionReauthenticated {
        /// The session's principal.
        principal: Principal,
        /// The mechanism used.
        mechanism: String,
        /// The client's address.
        client_address: IpAddr,
    },
    /// A session sent a request after its lifetime ended and was closed (KIP-368).
    SessionExpired {
        /// The session's principal.
        principal: Principal,
        /// The client's address.
        client_address: IpAddr,
    },
    /// A login module refreshed Portcullis' own upstream credential (KIP-368 client side).
    CredentialRefreshed {
        /// The principal name of the credential.
        principal_name: String,
        /// Its new expiry, if any.
        expiry_ms: Option<i64>,
    },
    /// A SCRAM credential was added, changed or removed.
    CredentialChanged {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: String,
    },
    /// ACLs were created or deleted; the change is durable and already applies to every
    /// connection. Counts only: the bindings themselves are read with `AclAdmin::describe_acls`.
    AclsChanged {
        /// How many ACLs were created (duplicates of existing ACLs are not counted).
        created: usize,
        /// How many ACLs were deleted.
        deleted: usize,
    },
    /// A delegation token was created (KIP-48). Never carries the HMAC.
    TokenCreated {
        /// The token id.
        token_id: String,
        /// Its owner.
        owner: Principal,
        /// Who asked for it (KIP-373).
        requester: Principal,
        /// When it expires unless renewed (ms since the epoch).
        expiry_ms: i64,
    },
    /// A delegation token's expiry changed and it is still valid: renewed (or shortened by an
    /// expire request with a positive period). Sessions authenticated with it get the new expiry
    /// at their next re-authentication; a shortened one also ends their current session sooner.
    TokenRenewed {
        /// The token id.
        token_id: String,
        /// The new expiry (ms since the epoch).
        expiry_ms: i64,
    },
    /// A delegation token can no longer be used: expired by a request, swept after its expiry,
    /// or removed. Every live session authenticated with it is closed at once.
    TokenExpired {
        /// The token id.
        token_id: String,
        /// Its owner.
        owner: Principal,
        /// Whether the token is gone from the store (removed by a request with a negative
        /// period, or swept); `false` when a request moved its expiry to now or earlier and the
        /// sweep has yet to remove it.
        removed: bool,
    },
    /// A credential was revoked by whoever owns it (a plugin mechanism, for example): every live
    /// session it authenticated is closed at once.
    CredentialRevoked {
        /// The credential.
        credential: CredentialId,
    },
}

/// A subscription: read events with [`Subscription::try_recv`] or [`Subscription::recv`].
#[derive(Debug)]
pub struct Subscription {
    receiver: Receiver<Event>,
}

impl Subscription {
    /// The next event, if one is queued.
    pub fn try_recv(&self) -> Option<Event> {
        self.receiver.try_recv().ok()
    }
    /// Waits for the next event; `None` when the bus is gone.
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
    subscribers: Mutex<Vec<SyncSender<Event>>>,
    dropped: AtomicU64,
}

impl EventBus {
    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Subscribes with a queue of `capacity` events.
    pub fn subscribe(&self, capacity: usize) -> Subscription {
        let (sender, receiver) = sync_channel(capacity.max(1));
        self.inner
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sender);
        Subscription { receiver }
    }

    /// Publishes an event to every subscriber without blocking.
    pub fn publish(&self, event: Event) {
        let mut subscribers = self
            .inner
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|s| match s.try_send(event.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
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
        assert!(b.try_recv().is_some() && b.try_recv().is_some());
    }

    #[test]
    fn forgets_dropped_subscribers() {
        let bus = EventBus::new();
        drop(bus.subscribe(1));
        bus.publish(failed());
        assert!(bus.inner.subscribers.lock().unwrap().is_empty());
    }
}
