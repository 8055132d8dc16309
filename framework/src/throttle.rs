//! Throttling of failed authentications, per client IP and per claimed user name.
//!
//! Kafka delays the answer to a failed authentication by `connection.failed.authentication.delay.ms`
//! and then closes the connection, so a password guesser waits that long per guess on each
//! connection. A fixed delay does not stop a guesser who opens many connections; this throttle
//! makes the delay grow with the recent failures of the client's IP address and of the user name
//! it claimed, up to a cap:
//!
//! ```text
//! score  = failures, decayed by half every `half_life` (per IP, and per user name)
//! delay  = base                                   while score ≤ free_failures
//!        = min(cap, base · 2^(score − free_failures))  after that
//! ```
//!
//! The larger of the IP's and the user name's delay applies. Only failures are ever delayed: a
//! client that authenticates correctly never waits, whatever its address or user name has done.
//!
//! Memory is fixed whatever an attacker does: the scores live in a count-min sketch (two rows of
//! [`SKETCH_WIDTH`] cells, each indexed by a differently keyed SipHash of the key). Two keys that
//! share a cell share a score, which can only make a *failing* client wait longer (a score is
//! never underestimated), and the random hash keys stop an attacker from choosing collisions. No
//! user name or address is stored.
//!
//! Sans-I/O like the rest of the framework: the caller passes the time.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::connection::limits::DEFAULT_FAILED_AUTH_DELAY;

/// Cells per sketch row. Two rows per key space (IPs, user names): 4 × 2,048 cells of 16 bytes,
/// 128 KiB for the node.
pub const SKETCH_WIDTH: usize = 2_048;
const ROWS: usize = 2;

/// How failed authentications are delayed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottlePolicy {
    /// The delay of a failure while the score is within `free_failures` (Kafka's
    /// `connection.failed.authentication.delay.ms`).
    pub base: Duration,
    /// The longest delay.
    pub cap: Duration,
    /// Failures (per IP and per user name, decayed) answered after `base` alone.
    pub free_failures: u32,
    /// How fast failures are forgotten: a score halves every `half_life`.
    pub half_life: Duration,
}

impl ThrottlePolicy {
    /// Kafka's fixed delay and nothing more: every failure waits `base`.
    pub fn fixed(base: Duration) -> Self {
        Self {
            base,
            cap: base,
            free_failures: 0,
            half_life: Duration::from_secs(60),
        }
    }

    /// The delay for a failure with this (decayed, already counted) score, to the millisecond.
    pub fn delay_for(&self, score: f64) -> Duration {
        let excess = score - f64::from(self.free_failures);
        if excess <= 0.0 {
            return self.base;
        }
        // 2^excess in floating point, capped before it goes back to an integer.
        let millis = self.base.as_secs_f64() * 1000.0 * excess.min(64.0).exp2();
        let cap = self.cap.as_secs_f64() * 1000.0;
        Duration::from_millis(millis.min(cap).round() as u64).max(self.base)
    }
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        Self {
            base: DEFAULT_FAILED_AUTH_DELAY,
            cap: Duration::from_secs(5),
            free_failures: 3,
            half_life: Duration::from_secs(60),
        }
    }
}

/// The failure scores of a node, shared by all its connections.
pub struct FailureThrottle {
    policy: ThrottlePolicy,
    ips: Sketch,
    users: Sketch,
}

impl FailureThrottle {
    /// An empty throttle.
    pub fn new(policy: ThrottlePolicy) -> Self {
        Self {
            policy,
            ips: Sketch::new(),
            users: Sketch::new(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &ThrottlePolicy {
        &self.policy
    }

    /// Counts one failed authentication from `ip`, for `user` when the client named one, at
    /// `now_ms`, and returns how long to wait before answering it.
    pub fn record_failure(&self, ip: IpAddr, user: Option<&str>, now_ms: i64) -> Duration {
        let half_life_ms = self.policy.half_life.as_secs_f64() * 1000.0;
        let ip_score = self.ips.add(&ip, now_ms, half_life_ms);
        let user_score = user.map_or(0.0, |u| self.users.add(&u, now_ms, half_life_ms));
        self.policy.delay_for(ip_score.max(user_score))
    }

    /// The delay the next failure from `ip` (for `user`) would get, without counting anything.
    pub fn next_delay(&self, ip: IpAddr, user: Option<&str>, now_ms: i64) -> Duration {
        let half_life_ms = self.policy.half_life.as_secs_f64() * 1000.0;
        let ip_score = self.ips.estimate(&ip, now_ms, half_life_ms) + 1.0;
        let user_score = user.map_or(0.0, |u| self.users.estimate(&u, now_ms, half_life_ms) + 1.0);
        self.policy.delay_for(ip_score.max(user_score))
    }
}

impl Default for FailureThrottle {
    fn default() -> Self {
        Self::new(ThrottlePolicy::default())
    }
}

impl std::fmt::Debug for FailureThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailureThrottle")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// One decaying score.
#[derive(Clone, Copy, Default)]
struct Cell {
    score: f64,
    updated_ms: i64,
}

impl Cell {
    fn decayed(&self, now_ms: i64, half_life_ms: f64) -> f64 {
        if self.score == 0.0 {
            return 0.0;
        }
        // A clock that went backwards decays nothing.
        let elapsed = now_ms.saturating_sub(self.updated_ms).max(0) as f64;
        self.score * (-elapsed / half_life_ms).exp2()
    }
}

/// A count-min sketch of decaying scores: `ROWS` rows, each indexed by its own keyed hash.
struct Sketch {
    hashers: [RandomState; ROWS],
    cells: Mutex<Vec<[Cell; ROWS]>>,
}

impl Sketch {
    fn new() -> Self {
        Self {
            hashers: [RandomState::new(), RandomState::new()],
            cells: Mutex::new(vec![[Cell::default(); ROWS]; SKETCH_WIDTH]),
        }
    }

    fn slots<K: Hash + ?Sized>(&self, key: &K) -> [usize; ROWS] {
        let mut slots = [0; ROWS];
        for (slot, hasher) in slots.iter_mut().zip(&self.hashers) {
            *slot = (hasher.hash_one(key) % SKETCH_WIDTH as u64) as usize;
        }
        slots
    }

    /// Adds one failure and returns the key's new score (the smallest of its cells).
    fn add<K: Hash + ?Sized>(&self, key: &K, now_ms: i64, half_life_ms: f64) -> f64 {
        let slots = self.slots(key);
        let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        let mut score = f64::INFINITY;
        for (row, slot) in slots.into_iter().enumerate() {
            if let Some(cell) = cells.get_mut(slot).and_then(|c| c.get_mut(row)) {
                cell.score = cell.decayed(now_ms, half_life_ms) + 1.0;
                cell.updated_ms = now_ms;
                score = score.min(cell.score);
            }
        }
        if score.is_finite() {
            score
        } else {
            1.0
        }
    }

    fn estimate<K: Hash + ?Sized>(&self, key: &K, now_ms: i64, half_life_ms: f64) -> f64 {
        let slots = self.slots(key);
        let cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        let mut score = f64::INFINITY;
        for (row, slot) in slots.into_iter().enumerate() {
            if let Some(cell) = cells.get(slot).and_then(|c| c.get(row)) {
                score = score.min(cell.decayed(now_ms, half_life_ms));
            }
        }
        if score.is_finite() {
            score
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const MS: i64 = 1;
    const SEC: i64 = 1_000 * MS;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    fn policy() -> ThrottlePolicy {
        ThrottlePolicy {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(5),
            free_failures: 3,
            half_life: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_delay_grows_after_the_free_failures_and_stops_at_the_cap() {
        let t = FailureThrottle::new(policy());
        let delays: Vec<u64> = (0..12)
            .map(|_| t.record_failure(ip(1), None, 0).as_millis() as u64)
            .collect();
        assert_eq!(
            delays,
            [100, 100, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );
    }

    #[test]
    fn another_address_and_another_user_are_not_slowed() {
        let t = FailureThrottle::new(policy());
        for _ in 0..20 {
            t.record_failure(ip(1), Some("alice"), 0);
        }
        assert_eq!(
            t.record_failure(ip(2), Some("bob"), 0),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn one_user_guessed_from_many_addresses_is_throttled_by_name() {
        let t = FailureThrottle::new(policy());
        let mut last = Duration::ZERO;
        for i in 0..10u8 {
            last = t.record_failure(ip(i), Some("alice"), 0);
        }
        assert_eq!(last, Duration::from_secs(5));
        // The same addresses guessing other names are only slowed by their own (one) failure each.
        assert_eq!(
            t.record_failure(ip(100), Some("zed"), 0),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn many_names_from_one_address_are_throttled_by_address() {
        let t = FailureThrottle::new(policy());
        let mut last = Duration::ZERO;
        for i in 0..10 {
            last = t.record_failure(ip(7), Some(&format!("user-{i}")), 0);
        }
        assert_eq!(last, Duration::from_secs(5));
    }

    #[test]
    fn failures_are_forgotten_with_time() {
        let t = FailureThrottle::new(policy());
        for _ in 0..10 {
            t.record_failure(ip(1), None, 0);
        }
        assert_eq!(t.next_delay(ip(1), None, 0), Duration::from_secs(5));
        // The next failure is free again once ten have decayed to two: log2(5) ≈ 2.3 half-lives.
        assert!(t.next_delay(ip(1), None, 120 * SEC) > Duration::from_millis(100));
        assert_eq!(
            t.next_delay(ip(1), None, 140 * SEC),
            Duration::from_millis(100)
        );
        // A clock going backwards does not make the score grow.
        assert_eq!(t.next_delay(ip(1), None, -SEC), Duration::from_secs(5));
    }

    #[test]
    fn a_fixed_policy_is_kafkas_fixed_delay() {
        let t = FailureThrottle::new(ThrottlePolicy::fixed(Duration::from_millis(100)));
        for _ in 0..50 {
            assert_eq!(
                t.record_failure(ip(1), Some("a"), 0),
                Duration::from_millis(100)
            );
        }
    }

    #[test]
    fn memory_stays_fixed_under_many_keys() {
        let t = FailureThrottle::new(policy());
        for i in 0..100_000u32 {
            let addr = IpAddr::V4(Ipv4Addr::from(i));
            t.record_failure(addr, Some(&i.to_string()), i64::from(i));
        }
        let cells = t.ips.cells.lock().unwrap();
        assert_eq!(cells.len(), SKETCH_WIDTH);
    }
}
