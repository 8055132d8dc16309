//! The per-connection response order: a Kafka client expects responses in the order of its
//! requests, so local answers wait behind every earlier request still out upstream.

use std::collections::VecDeque;

use bytes::Bytes;

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

#[derive(Debug)]
enum Entry {
    Ready(Bytes),
    Pending(Pending),
}

/// The responses a connection still owes its client, in request order.
#[derive(Debug, Default)]
pub struct ResponseQueue {
    entries: VecDeque<Entry>,
    pending: usize,
}

impl ResponseQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Responses owed, ready or not.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a response from upstream is awaited.
    pub fn has_pending(&self) -> bool {
        self.pending > 0
    }

    /// A response that is ready now (a local answer).
    pub fn push_ready(&mut self, frame: Bytes) {
        self.entries.push_back(Entry::Ready(frame));
    }

    /// A request sent upstream whose response will come later.
    pub fn push_pending(&mut self, pending: Pending) {
        self.pending += 1;
        self.entries.push_back(Entry::Pending(pending));
    }

    /// The oldest request still out upstream: the upstream answers in order, so the next
    /// upstream response is its answer.
    pub fn oldest_pending(&self) -> Option<&Pending> {
        self.entries.iter().find_map(|e| match e {
            Entry::Pending(p) => Some(p),
            Entry::Ready(_) => None,
        })
    }

    /// Fills in the oldest pending entry with its response.
    pub fn complete_oldest(&mut self, frame: Bytes) -> bool {
        let Some(slot) = self
            .entries
            .iter_mut()
            .find(|e| matches!(e, Entry::Pending(_)))
        else {
            return false;
        };
        *slot = Entry::Ready(frame);
        self.pending -= 1;
        true
    }

    /// Whether the response at the head of the queue is ready to be written.
    pub fn head_is_ready(&self) -> bool {
        matches!(self.entries.front(), Some(Entry::Ready(_)))
    }

    /// Takes the next response if it is ready; `None` when the queue is empty or its head still
    /// waits for upstream.
    pub fn pop_ready(&mut self) -> Option<Bytes> {
        match self.entries.front() {
            Some(Entry::Ready(_)) => match self.entries.pop_front() {
                Some(Entry::Ready(frame)) => Some(frame),
                _ => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(id: i32) -> Pending {
        Pending {
            plan: portcullis::authorization::ResponsePlan::unchanged(),
            api_key: 3,
            api_version: 12,
            correlation_id: id,
            upstream_call: crate::telemetry::traces::UpstreamCall::none(),
        }
    }

    #[test]
    fn local_answers_wait_behind_forwarded_requests() {
        let mut q = ResponseQueue::new();
        q.push_pending(pending(1));
        q.push_ready(Bytes::from_static(b"local-2"));
        q.push_pending(pending(3));
        assert_eq!(q.pop_ready(), None);
        assert!(!q.head_is_ready());
        assert_eq!(q.oldest_pending().map(|p| p.correlation_id), Some(1));
        assert!(q.complete_oldest(Bytes::from_static(b"up-1")));
        assert!(q.head_is_ready());
        assert_eq!(q.pop_ready(), Some(Bytes::from_static(b"up-1")));
        assert_eq!(q.pop_ready(), Some(Bytes::from_static(b"local-2")));
        assert_eq!(q.pop_ready(), None);
        assert_eq!(q.oldest_pending().map(|p| p.correlation_id), Some(3));
        assert!(q.has_pending());
        assert!(q.complete_oldest(Bytes::from_static(b"up-3")));
        assert!(!q.has_pending());
        assert_eq!(q.pop_ready(), Some(Bytes::from_static(b"up-3")));
        assert!(q.is_empty());
        assert!(!q.complete_oldest(Bytes::new()));
    }
}
