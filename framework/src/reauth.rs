//! The re-authentication scheduler (KIP-368): every authenticated session's deadline, and
//! revocation when a credential disappears.
//!
//! There is no timer and no task per session. Kafka only enforces a session's expiry when the
//! session sends a request (idle connections are not killed), so "is this session expired?" is a
//! comparison of the request's time with an atomic deadline held by the session's
//! [`SessionTicket`]: O(1) on the request path. What does need to reach idle sessions at once is
//! revocation — a SCRAM credential removed or changed, a delegation token expired or deleted — and
//! that goes through the scheduler's indexes by principal and by token to the affected tickets,
//! whose connections are woken through a runtime-agnostic future ([`SessionTicket::revoked`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use crate::events::Event;
use crate::principal::Principal;

/// A deadline that never comes.
const NO_EXPIRY: i64 = i64::MAX;

/// One authenticated session as the scheduler sees it. Dropping the last reference unregisters it.
pub struct SessionTicket {
    id: u64,
    principal_name: String,
    mechanism: String,
    token_id: Option<String>,
    expires_at_ms: AtomicI64,
    revoked: AtomicBool,
    waker: Mutex<Option<Waker>>,
    scheduler: Weak<Inner>,
}

impl SessionTicket {
    /// The session's deadline, if it has one.
    pub fn expires_at_ms(&self) -> Option<i64> {
        match self.expires_at_ms.load(Ordering::Acquire) {
            NO_EXPIRY => None,
            t => Some(t),
        }
    }

    /// Whether a request at `now_ms` comes after the deadline (Kafka: `now > sessionExpiry`).
    pub fn is_expired(&self, now_ms: i64) -> bool {
        now_ms > self.expires_at_ms.load(Ordering::Acquire)
    }

    /// Whether the session's credential was removed or changed.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// Completes when the session is revoked. Runtime-agnostic: any executor can await it.
    pub fn revoked(self: &Arc<Self>) -> Revoked {
        Revoked {
            ticket: Arc::clone(self),
        }
    }

    /// The delegation token the session used, if any.
    pub fn token_id(&self) -> Option<&str> {
        self.token_id.as_deref()
    }

    fn renew(&self, expires_at_ms: Option<i64>) {
        self.expires_at_ms
            .store(expires_at_ms.unwrap_or(NO_EXPIRY), Ordering::Release);
    }

    fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
        if let Some(waker) = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            waker.wake();
        }
    }
}

impl Drop for SessionTicket {
    fn drop(&mut self) {
        if let Some(inner) = self.scheduler.upgrade() {
            inner.unregister(self.id, &self.principal_name, self.token_id.as_deref());
        }
    }
}

impl std::fmt::Debug for SessionTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTicket")
            .field("id", &self.id)
            .field("principal", &self.principal_name)
            .field("expires_at_ms", &self.expires_at_ms())
            .field("revoked", &self.is_revoked())
            .finish()
    }
}

/// The future returned by [`SessionTicket::revoked`].
#[derive(Debug)]
pub struct Revoked {
    ticket: Arc<SessionTicket>,
}

impl Future for Revoked {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.ticket.is_revoked() {
            return Poll::Ready(());
        }
        *self
            .ticket
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        // Checked again after storing the waker, so a revocation between the two checks is not lost.
        if self.ticket.is_revoked() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Holds every authenticated session of a node.
#[derive(Clone, Debug, Default)]
pub struct ReauthScheduler {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: AtomicU64,
    by_principal: Mutex<HashMap<String, HashMap<u64, Weak<SessionTicket>>>>,
    by_token: Mutex<HashMap<String, HashMap<u64, Weak<SessionTicket>>>>,
}

impl Inner {
    fn unregister(&self, id: u64, principal: &str, token: Option<&str>) {
        remove_from(&self.by_principal, principal, id);
        if let Some(token) = token {
            remove_from(&self.by_token, token, id);
        }
    }
}

fn remove_from(
    index: &Mutex<HashMap<String, HashMap<u64, Weak<SessionTicket>>>>,
    key: &str,
    id: u64,
) {
    let mut index = index.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(sessions) = index.get_mut(key) {
        sessions.remove(&id);
        if sessions.is_empty() {
            index.remove(key);
        }
    }
}

impl ReauthScheduler {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a newly authenticated session.
    pub fn register(
        &self,
        principal: &Principal,
        mechanism: &str,
        token_id: Option<String>,
        expires_at_ms: Option<i64>,
    ) -> Arc<SessionTicket> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let ticket = Arc::new(SessionTicket {
            id,
            principal_name: principal.name.clone(),
            mechanism: mechanism.to_owned(),
            token_id: token_id.clone(),
            expires_at_ms: AtomicI64::new(expires_at_ms.unwrap_or(NO_EXPIRY)),
            revoked: AtomicBool::new(false),
            waker: Mutex::new(None),
            scheduler: Arc::downgrade(&self.inner),
        });
        let weak = Arc::downgrade(&ticket);
        self.inner
            .by_principal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(principal.name.clone())
            .or_default()
            .insert(id, weak.clone());
        if let Some(token) = token_id {
            self.inner
                .by_token
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(token)
                .or_default()
                .insert(id, weak);
        }
        ticket
    }

    /// Records a successful re-authentication: the session keeps its ticket with a new deadline.
    pub fn renew(&self, ticket: &SessionTicket, expires_at_ms: Option<i64>) {
        ticket.renew(expires_at_ms);
    }

    /// Revokes the password-authenticated sessions of `user` that used `mechanism` (or PLAIN, which
    /// verifies against the SCRAM credentials). Returns how many were revoked.
    pub fn revoke_user_credential(&self, user: &str, mechanism: &str) -> usize {
        let index = self
            .inner
            .by_principal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(sessions) = index.get(user) else {
            return 0;
        };
        let affected: Vec<Arc<SessionTicket>> = sessions
            .values()
            .filter_map(Weak::upgrade)
            .filter(|t| {
                t.token_id.is_none() && (t.mechanism == mechanism || t.mechanism == "PLAIN")
            })
            .collect();
        drop(index);
        affected.iter().for_each(|t| t.revoke());
        affected.len()
    }

    /// Revokes every session authenticated with the delegation token.
    pub fn revoke_token(&self, token_id: &str) -> usize {
        let index = self
            .inner
            .by_token
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let affected: Vec<Arc<SessionTicket>> = index
            .get(token_id)
            .map(|s| s.values().filter_map(Weak::upgrade).collect())
            .unwrap_or_default();
        drop(index);
        affected.iter().for_each(|t| t.revoke());
        affected.len()
    }

    /// Reacts to a security event (subscribe it to the [`crate::events::EventBus`]).
    pub fn handle_event(&self, event: &Event) -> usize {
        match event {
            Event::CredentialChanged { user, mechanism } => {
                self.revoke_user_credential(user, mechanism)
            }
            _ => 0,
        }
    }

    /// The number of live sessions.
    pub fn len(&self) -> usize {
        self.inner
            .by_principal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(HashMap::len)
            .sum()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn expiry_is_a_comparison() {
        let s = ReauthScheduler::new();
        let t = s.register(
            &Principal::user("alice"),
            "SCRAM-SHA-512",
            None,
            Some(1_000),
        );
        assert!(!t.is_expired(1_000));
        assert!(t.is_expired(1_001));
        s.renew(&t, Some(5_000));
        assert!(!t.is_expired(1_001));
        s.renew(&t, None);
        assert!(!t.is_expired(i64::MAX - 1));
    }

    #[test]
    fn removing_a_credential_revokes_the_users_password_sessions_and_wakes_them() {
        let s = ReauthScheduler::new();
        let scram = s.register(&Principal::user("alice"), "SCRAM-SHA-512", None, None);
        let plain = s.register(&Principal::user("alice"), "PLAIN", None, None);
        let other_mech = s.register(&Principal::user("alice"), "SCRAM-SHA-256", None, None);
        let token = s.register(
            &Principal::user("alice"),
            "SCRAM-SHA-512",
            Some("tok".into()),
            None,
        );
        let bob = s.register(&Principal::user("bob"), "SCRAM-SHA-512", None, None);

        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut fut = scram.revoked();
        assert!(Pin::new(&mut fut)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());

        let n = s.handle_event(&Event::CredentialChanged {
            user: "alice".into(),
            mechanism: "SCRAM-SHA-512".into(),
        });
        assert_eq!(n, 2);
        assert!(flag.0.load(Ordering::SeqCst));
        assert!(Pin::new(&mut fut)
            .poll(&mut Context::from_waker(&waker))
            .is_ready());
        assert!(scram.is_revoked() && plain.is_revoked());
        assert!(!other_mech.is_revoked() && !token.is_revoked() && !bob.is_revoked());

        assert_eq!(s.revoke_token("tok"), 1);
        assert!(token.is_revoked());
    }

    #[test]
    fn dropping_a_ticket_unregisters_it() {
        let s = ReauthScheduler::new();
        let a = s.register(&Principal::user("alice"), "PLAIN", Some("t".into()), None);
        let b = s.register(&Principal::user("alice"), "PLAIN", None, None);
        assert_eq!(s.len(), 2);
        drop(a);
        assert_eq!(s.len(), 1);
        assert_eq!(s.revoke_token("t"), 0);
        drop(b);
        assert!(s.is_empty());
        assert!(s.inner.by_principal.lock().unwrap().is_empty());
    }
}
