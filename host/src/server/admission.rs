//! Who may connect, and how much an unauthenticated connection may hold.
//!
//! - `max_connections` (Kafka's `max.connections`): when every slot is taken, the listeners stop
//!   accepting until one frees up; new clients wait in the kernel's accept backlog, as with
//!   Kafka (KIP-402).
//! - `max_connections_per_ip` (Kafka's `max.connections.per.ip`): a connection beyond it is
//!   accepted and closed at once, as Kafka does.
//! - The pre-authentication buffer budget: a SASL frame larger than
//!   [`PRE_AUTH_UNRESERVED_BYTES`] is read only once its size is reserved from a budget shared by
//!   every unauthenticated connection, so slow senders of large frames cannot hold more than the
//!   budget between them, however many connections they open.
//!
//! Every admitted connection holds a [`Slot`]; dropping it frees the slot. The server waits for
//! all slots to be returned when it stops ([`Admission::wait_until_empty`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// Frames up to this size are read before authentication without touching the budget: every
/// SASL token of the built-in mechanisms, ApiVersions and SaslHandshake fit in it.
pub const PRE_AUTH_UNRESERVED_BYTES: usize = 8 * 1024;

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The client's address already holds `max_connections_per_ip` connections.
    #[error("{ip} already has the maximum of {limit} connections (max_connections_per_ip)")]
    PerIp {
        /// The client's address.
        ip: IpAddr,
        /// The limit.
        limit: u32,
    },
    /// Every slot is taken (only when another listener took the last one first).
    #[error("the maximum of {0} connections is reached (max_connections)")]
    Total(usize),
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, u32>,
}

/// The node's connection slots and pre-authentication buffer budget.
#[derive(Debug)]
pub struct Admission {
    /// The limits may change while connections are open (a configuration reload): a lowered
    /// limit refuses new connections only, never closes one.
    max_total: AtomicUsize,
    /// 0: no limit per address.
    max_per_ip: AtomicU32,
    counts: Mutex<Counts>,
    /// Woken whenever a slot is returned.
    freed: Notify,
    pre_auth_budget: AtomicUsize,
    pre_auth_reserved: AtomicUsize,
}

impl Admission {
    /// Slots for `max_total` connections, at most `max_per_ip` per client address, and
    /// `pre_auth_budget` bytes of large pre-authentication frames.
    pub fn new(max_total: usize, max_per_ip: Option<u32>, pre_auth_budget: usize) -> Self {
        Self {
            max_total: AtomicUsize::new(max_total),
            max_per_ip: AtomicU32::new(max_per_ip.unwrap_or(0)),
            counts: Mutex::new(Counts::default()),
            freed: Notify::new(),
            pre_auth_budget: AtomicUsize::new(pre_auth_budget),
            pre_auth_reserved: AtomicUsize::new(0),
        }
    }

    /// Replaces the limits (a configuration reload). Connections already admitted stay; a
    /// listener waiting for a slot looks again at once.
    pub fn set_limits(&self, max_total: usize, max_per_ip: Option<u32>, pre_auth_budget: usize) {
        self.max_total.store(max_total, Ordering::Relaxed);
        self.max_per_ip
            .store(max_per_ip.unwrap_or(0), Ordering::Relaxed);
        self.pre_auth_budget
            .store(pre_auth_budget, Ordering::Relaxed);
        self.freed.notify_waiters();
    }

    fn max_total(&self) -> usize {
        self.max_total.load(Ordering::Relaxed)
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections admitted and not yet closed.
    pub fn live(&self) -> usize {
        self.counts().total
    }

    /// Returns once a slot is free (at once when one is). Listeners call it before `accept`.
    pub async fn wait_for_free_slot(&self) {
        loop {
            // Registered before the check, so a slot freed in between is not missed.
            let freed = self.freed.notified();
            if self.live() < self.max_total() {
                return;
            }
            freed.await;
        }
    }

    /// Returns once every admitted connection has closed.
    pub async fn wait_until_empty(&self) {
        loop {
            let freed = self.freed.notified();
            if self.live() == 0 {
                return;
            }
            freed.await;
        }
    }

    /// Takes a slot for a connection from `ip`.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let mut counts = self.counts();
        let max_total = self.max_total();
        if counts.total >= max_total {
            return Err(Refused::Total(max_total));
        }
        let from_ip = counts.per_ip.entry(ip).or_insert(0);
        if let Some(limit) = Some(self.max_per_ip.load(Ordering::Relaxed)).filter(|l| *l > 0) {
            if *from_ip >= limit {
                if *from_ip == 0 {
                    counts.per_ip.remove(&ip);
                }
                return Err(Refused::PerIp { ip, limit });
            }
        }
        *from_ip += 1;
        counts.total += 1;
        Ok(Slot {
            admission: Arc::clone(self),
            ip,
        })
    }

    /// Reserves `bytes` of the pre-authentication budget for one frame, or `None` when the
    /// budget cannot cover it.
    pub fn reserve_pre_auth(self: &Arc<Self>, bytes: usize) -> Option<PreAuthReservation> {
        let mut current = self.pre_auth_reserved.load(Ordering::Relaxed);
        loop {
            let next = current.checked_add(bytes)?;
            if next > self.pre_auth_budget.load(Ordering::Relaxed) {
                return None;
            }
            match self.pre_auth_reserved.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(PreAuthReservation {
                        admission: Arc::clone(self),
                        bytes,
                    })
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Bytes of the pre-authentication budget reserved right now.
    pub fn pre_auth_reserved(&self) -> usize {
        self.pre_auth_reserved.load(Ordering::Relaxed)
    }

    fn release(&self, ip: IpAddr) {
        {
            let mut counts = self.counts();
            counts.total = counts.total.saturating_sub(1);
            if let Some(n) = counts.per_ip.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    counts.per_ip.remove(&ip);
                }
            }
        }
        self.freed.notify_waiters();
    }
}

/// One admitted connection; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.release(self.ip);
    }
}

/// Part of the pre-authentication budget, held while one large frame is read and handled.
#[derive(Debug)]
pub struct PreAuthReservation {
    admission: Arc<Admission>,
    bytes: usize,
}

impl Drop for PreAuthReservation {
    fn drop(&mut self) {
        self.admission
            .pre_auth_reserved
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn per_ip_and_total_limits() {
        let a = Arc::new(Admission::new(3, Some(2), 0));
        let s1 = a.admit(ip(1)).unwrap();
        let _s2 = a.admit(ip(1)).unwrap();
        assert_eq!(
            a.admit(ip(1)).unwrap_err(),
            Refused::PerIp {
                ip: ip(1),
                limit: 2
            }
        );
        let _s3 = a.admit(ip(2)).unwrap();
        assert_eq!(a.admit(ip(3)).unwrap_err(), Refused::Total(3));
        drop(s1);
        assert_eq!(a.live(), 2);
        let _s4 = a.admit(ip(1)).unwrap();
        // A refused address leaves no entry behind.
        assert_eq!(a.counts().per_ip.len(), 2);
    }

    #[tokio::test]
    async fn waiting_for_a_slot_ends_when_one_is_freed() {
        let a = Arc::new(Admission::new(1, None, 0));
        let slot = a.admit(ip(1)).unwrap();
        let waiter = tokio::spawn({
            let a = Arc::clone(&a);
            async move { a.wait_for_free_slot().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(slot);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), a.wait_until_empty())
            .await
            .unwrap();
    }

    #[test]
    fn the_pre_auth_budget_is_shared_and_returned() {
        let a = Arc::new(Admission::new(10, None, 1_000));
        let r1 = a.reserve_pre_auth(600).unwrap();
        assert!(a.reserve_pre_auth(600).is_none());
        let r2 = a.reserve_pre_auth(400).unwrap();
        assert_eq!(a.pre_auth_reserved(), 1_000);
        drop(r1);
        drop(r2);
        assert_eq!(a.pre_auth_reserved(), 0);
        assert!(a.reserve_pre_auth(usize::MAX).is_none());
    }
}
