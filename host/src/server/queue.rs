//! The per-connection response order, shared by the two sides of a connection: a Kafka client
//! expects responses in the order of its requests, so the request side (which reads the client
//! and sends upstream) appends one entry per request that gets a response, and the response side
//! (which reads the upstream and writes the client) answers them from the front, in order.
//!
//! Its capacity is the number of requests a client may have outstanding: the request side reads
//! no more while it is full (TCP back-pressure then slows the client), and the response side
//! makes room as it answers.
//!
//! The response side is woken only when it has something to do that no upstream byte will tell
//! it: a local answer to write, a change of phase, or the first request after the queue was empty
//! (it then reads the upstream in larger pieces). A forwarded request behind others needs no
//! wake-up: its answer arrives on the upstream socket, which the response side watches anyway.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::relay::{Expected, Mode};
use super::rewrite::carries_addresses;
use super::upstream_reader::UpstreamReader;

/// Whether responses that need no change are relayed as they arrive (off: every response is
/// collected whole first).
const CUT_THROUGH: bool = true;

/// A forwarded request whose response has not arrived yet.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The API key (to know whether the response carries broker addresses).
    pub api_key: i16,
    /// The API version (to decode the response).
    pub api_version: i16,
    /// The correlation id the upstream must answer with.
    pub correlation_id: i32,
    /// What authorization requires of the response (filtering, merging denied entries).
    pub plan: portcullis::authorization::ResponsePlan,
    /// The upstream call's trace span and start (telemetry).
    pub upstream_call: crate::telemetry::traces::UpstreamCall,
}

impl Pending {
    /// How the response is forwarded: relayed as it arrives unless authorization changes it or it
    /// carries broker addresses (Metadata, FindCoordinator, DescribeCluster), which are rewritten.
    pub fn mode(&self) -> Mode {
        if CUT_THROUGH && self.plan.is_unchanged() && !carries_addresses(self.api_key) {
            Mode::Stream
        } else {
            Mode::Whole
        }
    }
}

/// One of Portcullis' own requests on a client's upstream connection (a re-authentication step):
/// its response goes back to the request side, not to the client.
#[derive(Debug)]
pub struct Internal {
    /// The correlation id (from the reserved range).
    pub correlation_id: i32,
    /// Where the response goes.
    pub reply: oneshot::Sender<Bytes>,
}

/// An entry of the queue.
#[derive(Debug)]
pub enum Entry {
    /// A response that is ready (a local answer).
    Ready(Bytes),
    /// A request sent upstream.
    Pending(Pending),
    /// Portcullis' own request sent upstream.
    Internal(Internal),
    /// The upstream connection was opened: the response side reads it from here on.
    Upstream(UpstreamReader),
    /// No more entries: the response side ends once everything before is written.
    Finish,
}

/// What is at the front of the queue, as the response side sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// Nothing is owed.
    Empty,
    /// A ready response.
    Ready,
    /// An answer from upstream is awaited.
    Awaiting(Expected),
    /// The upstream's reader.
    Upstream,
    /// The end of the responses.
    Finish,
    /// The response side must stop at once (the connection is closing).
    Stop,
}

#[derive(Debug, Default)]
struct State {
    entries: VecDeque<Entry>,
    /// The response side must stop.
    stop: bool,
    /// The response side has ended: nothing more is answered.
    closed: bool,
    /// When a response was last written to the client.
    last_write: Option<Instant>,
}

/// The responses a connection still owes its client, in request order.
#[derive(Debug)]
pub struct ResponseQueue {
    state: Mutex<State>,
    capacity: usize,
    /// Wakes the response side.
    wake: Notify,
    /// Wakes the request side when an answer made room.
    room: Notify,
}

impl ResponseQueue {
    /// An empty queue for up to `capacity` outstanding requests.
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            capacity,
            wake: Notify::new(),
            room: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic cannot happen while the lock is held (no code here panics); if it ever did, the
        // queue's data is still consistent (every change is one VecDeque operation).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, entry: Entry, wake: bool) {
        let mut state = self.state();
        if state.closed {
            // The response side has ended; the request side learns it from the task's end.
            return;
        }
        let was_empty = state.entries.is_empty();
        state.entries.push_back(entry);
        drop(state);
        if wake || was_empty {
            self.wake.notify_one();
        }
    }

    // ---- the request side ------------------------------------------------------------------

    /// Responses owed, ready or not.
    pub fn len(&self) -> usize {
        self.state().entries.len()
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.state().entries.is_empty()
    }

    /// Whether another request may be read.
    pub fn has_room(&self) -> bool {
        self.len() < self.capacity
    }

    /// Completes after an answer made room (possibly already; the caller checks again).
    pub async fn room(&self) {
        self.room.notified().await
    }

    /// When a response was last written to the client.
    pub fn last_write(&self) -> Option<Instant> {
        self.state().last_write
    }

    /// A response that is ready now (a local answer).
    pub fn push_ready(&self, frame: Bytes) {
        self.push(Entry::Ready(frame), true);
    }

    /// A request about to be sent upstream. Appended *before* the request is written, so its
    /// answer always finds it.
    pub fn push_pending(&self, pending: Pending) {
        self.push(Entry::Pending(pending), false);
    }

    /// One of Portcullis' own requests about to be sent upstream.
    pub fn push_internal(&self, internal: Internal) {
        self.push(Entry::Internal(internal), true);
    }

    /// The upstream connection, opened before the first request is sent on it.
    pub fn push_upstream(&self, reader: UpstreamReader) {
        self.push(Entry::Upstream(reader), true);
    }

    /// Nothing more will be appended: the response side ends once it has written every response
    /// owed (a drain).
    pub fn finish(&self) {
        self.push(Entry::Finish, true);
    }

    /// The response side must stop at once, whatever is still owed.
    pub fn stop(&self) {
        self.state().stop = true;
        self.wake.notify_one();
    }

    // ---- the response side -----------------------------------------------------------------

    /// What is at the front.
    pub fn head(&self) -> Head {
        let state = self.state();
        if state.stop {
            return Head::Stop;
        }
        match state.entries.front() {
            None => Head::Empty,
            Some(Entry::Ready(_)) => Head::Ready,
            Some(Entry::Pending(pending)) => Head::Awaiting(Expected {
                correlation_id: pending.correlation_id,
                mode: pending.mode(),
            }),
            Some(Entry::Internal(internal)) => Head::Awaiting(Expected {
                correlation_id: internal.correlation_id,
                mode: Mode::Whole,
            }),
            Some(Entry::Upstream(_)) => Head::Upstream,
            Some(Entry::Finish) => Head::Finish,
        }
    }

    /// Takes the front entry (answered, or acted upon).
    pub fn pop(&self) -> Option<Entry> {
        let mut state = self.state();
        let was_full = state.entries.len() >= self.capacity;
        let entry = state.entries.pop_front();
        drop(state);
        if was_full {
            self.room.notify_one();
        }
        entry
    }

    /// Completes when the request side has something for the response side (possibly already;
    /// the caller looks at the head again).
    pub async fn woken(&self) {
        self.wake.notified().await
    }

    /// Whether the response side must stop.
    pub fn stopping(&self) -> bool {
        self.state().stop
    }

    /// Records that a response was written.
    pub fn wrote(&self, at: Instant) {
        self.state().last_write = Some(at);
    }

    /// The response side has ended: what is still queued is dropped (a request side waiting for
    /// an internal answer learns it from its dropped sender), and nothing more is accepted.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        let entries = std::mem::take(&mut state.entries);
        drop(state);
        drop(entries);
        self.room.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(id: i32, api_key: i16) -> Pending {
        Pending {
            plan: portcullis::authorization::ResponsePlan::unchanged(),
            api_key,
            api_version: 12,
            correlation_id: id,
            upstream_call: crate::telemetry::traces::UpstreamCall::none(),
        }
    }

    #[test]
    fn entries_come_out_in_request_order() {
        let q = ResponseQueue::new(10);
        assert_eq!(q.head(), Head::Empty);
        q.push_pending(pending(1, 1));
        q.push_ready(Bytes::from_static(b"local-2"));
        q.push_pending(pending(3, 3));
        assert_eq!(q.len(), 3);
        let unchanged = if CUT_THROUGH {
            Mode::Stream
        } else {
            Mode::Whole
        };
        assert_eq!(
            q.head(),
            Head::Awaiting(Expected {
                correlation_id: 1,
                mode: unchanged
            })
        );
        assert!(matches!(q.pop(), Some(Entry::Pending(p)) if p.correlation_id == 1));
        assert_eq!(q.head(), Head::Ready);
        assert!(matches!(q.pop(), Some(Entry::Ready(b)) if b == "local-2"));
        // Metadata carries broker addresses: collected whole and rewritten.
        assert_eq!(
            q.head(),
            Head::Awaiting(Expected {
                correlation_id: 3,
                mode: Mode::Whole
            })
        );
        q.finish();
        q.pop();
        assert_eq!(q.head(), Head::Finish);
        q.stop();
        assert_eq!(q.head(), Head::Stop);
    }

    #[test]
    fn the_capacity_bounds_what_the_request_side_reads() {
        let q = ResponseQueue::new(2);
        q.push_pending(pending(1, 0));
        assert!(q.has_room());
        q.push_pending(pending(2, 0));
        assert!(!q.has_room());
        q.pop();
        assert!(q.has_room());
    }

    #[tokio::test]
    async fn closing_drops_what_is_owed_and_refuses_more() {
        let q = ResponseQueue::new(4);
        let (reply, answer) = oneshot::channel();
        q.push_internal(Internal {
            correlation_id: i32::MAX,
            reply,
        });
        q.close();
        assert!(answer.await.is_err());
        q.push_ready(Bytes::from_static(b"late"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn a_local_answer_wakes_the_response_side_a_request_behind_others_does_not() {
        let q = ResponseQueue::new(4);
        q.push_pending(pending(1, 0)); // first after empty: wakes
        q.woken().await;
        q.push_pending(pending(2, 0)); // behind another: no wake-up
        let woken = tokio::time::timeout(std::time::Duration::from_millis(20), q.woken()).await;
        assert!(woken.is_err());
        q.push_ready(Bytes::new());
        q.woken().await;
    }
}
