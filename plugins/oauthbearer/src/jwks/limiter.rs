//! Which unknown `kid`s may ask the host for a key set refresh.
//!
//! Kafka (`RefreshingHttpsJwks.maybeExpediteRefresh`) allows one refresh per kid per 60 s,
//! remembers the last 16 kids, and never asks for a kid over 1000 characters. That bounds memory,
//! but a flood of tokens with random kids still gets one refresh each. We add a floor between
//! any two requests, so the flood costs the identity provider one fetch per floor interval.

use std::collections::VecDeque;
use std::sync::Mutex;

/// The refresh rate limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefreshLimits {
    /// The least time between two requests for the same kid, in ms (Kafka: 60 s).
    pub per_kid_ms: i64,
    /// The least time between any two requests, in ms (ours; 10 s).
    pub global_ms: i64,
    /// How many kids are remembered (Kafka: 16, least recently seen forgotten first).
    pub remembered_kids: usize,
    /// Kids longer than this never ask (Kafka: 1000 characters).
    pub max_kid_len: usize,
}

impl Default for RefreshLimits {
    fn default() -> Self {
        Self {
            per_kid_ms: 60_000,
            global_ms: 10_000,
            remembered_kids: 16,
            max_kid_len: 1000,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// (kid, time of its last request), least recently seen first.
    kids: VecDeque<(String, i64)>,
    last_request_ms: Option<i64>,
}

/// The limiter.
#[derive(Debug, Default)]
pub(crate) struct KidLimiter {
    limits: RefreshLimits,
    state: Mutex<State>,
}

impl KidLimiter {
    pub(crate) fn new(limits: RefreshLimits) -> Self {
        Self {
            limits,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether an unknown `kid` seen at `now_ms` may ask for a refresh (and records it if so).
    pub(crate) fn allow(&self, kid: &str, now_ms: i64) -> bool {
        if kid.chars().count() > self.limits.max_kid_len {
            return false;
        }
        // The state stays consistent at every step, so a poisoned lock is still usable.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let seen = state
            .kids
            .iter()
            .position(|(k, _)| k == kid)
            .and_then(|i| state.kids.remove(i));
        if let Some((_, last)) = &seen {
            let last = *last;
            if now_ms < last.saturating_add(self.limits.per_kid_ms) {
                // Still remembered, now as the most recently seen.
                state.kids.push_back((kid.to_owned(), last));
                return false;
            }
        }
        if let Some(last) = state.last_request_ms {
            if now_ms < last.saturating_add(self.limits.global_ms) {
                // Not recorded as asked: the kid may ask once the floor has passed.
                if let Some(entry) = seen {
                    state.kids.push_back(entry);
                }
                return false;
            }
        }
        state.kids.push_back((kid.to_owned(), now_ms));
        while state.kids.len() > self.limits.remembered_kids {
            state.kids.pop_front();
        }
        state.last_request_ms = Some(now_ms);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka_like() -> KidLimiter {
        KidLimiter::new(RefreshLimits {
            global_ms: 0,
            ..RefreshLimits::default()
        })
    }

    #[test]
    fn once_per_kid_per_minute() {
        let l = kafka_like();
        assert!(l.allow("a", 0));
        assert!(!l.allow("a", 1));
        assert!(!l.allow("a", 59_999));
        assert!(l.allow("b", 10));
        assert!(l.allow("a", 60_000));
        assert!(!l.allow("a", 60_001));
    }

    #[test]
    fn remembers_sixteen_kids() {
        let l = kafka_like();
        for i in 0..17 {
            assert!(l.allow(&format!("k{i}"), 0));
        }
        // k0 was forgotten (least recently seen), k1 still remembered.
        assert!(l.allow("k0", 1));
        assert!(!l.allow("k2", 1));
        let state = l.state.lock().unwrap();
        assert_eq!(state.kids.len(), 16);
    }

    #[test]
    fn long_kids_never_ask() {
        let l = kafka_like();
        assert!(!l.allow(&"x".repeat(1001), 0));
        assert!(l.allow(&"x".repeat(1000), 0));
    }

    #[test]
    fn global_floor_bounds_a_flood() {
        let l = KidLimiter::new(RefreshLimits::default());
        let allowed = (0..1000)
            .filter(|i| l.allow(&format!("random-{i}"), i64::from(*i)))
            .count();
        assert_eq!(allowed, 1);
        // A kid held back by the floor asks once the floor has passed.
        assert!(!l.allow("rotated", 5_000));
        assert!(l.allow("rotated", 10_000));
        assert!(l.state.lock().unwrap().kids.len() <= 16);
    }
}
