//! The re-authentication scheduler (KIP-368): every authenticated session's deadline, and
//! revocation when what authenticated a session disappears.
//!
//! There is no timer and no task per session. Kafka only enforces a session's expiry when the
//! session sends a request (idle connections are not killed), so "is this session expired?" is a
//! comparison of the request's time with an atomic deadline held by the session's
//! [`SessionTicket`]: O(1) on the request path. What does need to reach idle sessions at once is
//! revocation — a SCRAM credential removed or changed, a delegation token expired or removed, a
//! plugin's credential revoked — and that goes through the scheduler's index by *what
//! authenticated the session* ([`CredentialId`]) to the affected tickets, whose connections are
//! woken through a runtime-agnostic future ([`SessionTicket::revoked`]). Principal names are never
//! used for this: a principal builder may rename principals, and one user may hold password and
//! token sessions at once.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use crate::credentials::{CredentialId, ScramMechanism};
use crate::events::Event;

/// A deadline that never comes.
const NO_EXPIRY: i64 = i64::MAX;

type Index = HashMap<CredentialId, HashMap<u64, Weak<SessionTicket>>>;

/// One authenticated session as the scheduler sees it. Dropping the last reference unregisters it.
pub struct SessionTicket {
    id: u64,
    /// What authenticated the session; changes when a re-authentication uses something else.
    credential: Mutex<CredentialId>,
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

    /// Whether what authenticated the session was removed or changed.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// Completes when the session is revoked. Runtime-agnostic: any executor can await it.
    pub fn revoked(self: &Arc<Self>) -> Revoked {
        Revoked {
            ticket: Arc::clone(self),
        }
    }

    /// What authenticated the session.
    pub fn credential(&self) -> CredentialId {
        self.credential_guard().clone()
    }

    /// The delegation token the session used, if any.
    pub fn token_id(&self) -> Option<String> {
        match &*self.credential_guard() {
            CredentialId::Token { token_id } => Some(token_id.clone()),
            _ => None,
        }
    }

    fn credential_guard(&self) -> std::sync::MutexGuard<'_, CredentialId> {
        self.credential
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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

    /// Moves the deadline earlier if `deadline_ms` comes first (never later).
    fn cap_deadline(&self, deadline_ms: i64) {
        self.expires_at_ms.fetch_min(deadline_ms, Ordering::AcqRel);
    }
}

impl Drop for SessionTicket {
    fn drop(&mut self) {
        if let Some(inner) = self.scheduler.upgrade() {
            let credential = self.credential_guard().clone();
            inner.unregister(self.id, &credential);
            inner.live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for SessionTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTicket")
            .field("id", &self.id)
            .field("credential", &*self.credential_guard())
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
    live: AtomicUsize,
    by_credential: Mutex<Index>,
}

impl Inner {
    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.by_credential
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn unregister(&self, id: u64, credential: &CredentialId) {
        let mut index = self.index();
        if let Some(sessions) = index.get_mut(credential) {
            sessions.remove(&id);
            if sessions.is_empty() {
                index.remove(credential);
            }
        }
    }

    fn sessions_of(&self, credential: &CredentialId) -> Vec<Arc<SessionTicket>> {
        self.index()
            .get(credential)
            .map(|s| s.values().filter_map(Weak::upgrade).collect())
            .unwrap_or_default()
    }
}

impl ReauthScheduler {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a newly authenticated session and what authenticated it.
    pub fn register(
        &self,
        credential: CredentialId,
        expires_at_ms: Option<i64>,
    ) -> Arc<SessionTicket> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let ticket = Arc::new(SessionTicket {
            id,
            credential: Mutex::new(credential.clone()),
            expires_at_ms: AtomicI64::new(expires_at_ms.unwrap_or(NO_EXPIRY)),
            revoked: AtomicBool::new(false),
            waker: Mutex::new(None),
            scheduler: Arc::downgrade(&self.inner),
        });
        self.inner.live.fetch_add(1, Ordering::AcqRel);
        self.inner
            .index()
            .entry(credential)
            .or_default()
            .insert(id, Arc::downgrade(&ticket));
        ticket
    }

    /// Records a successful re-authentication: the session keeps its ticket with a new deadline,
    /// now belonging to what authenticated it this time.
    pub fn renew(
        &self,
        ticket: &Arc<SessionTicket>,
        expires_at_ms: Option<i64>,
        credential: CredentialId,
    ) {
        ticket
            .expires_at_ms
            .store(expires_at_ms.unwrap_or(NO_EXPIRY), Ordering::Release);
        let previous = std::mem::replace(&mut *ticket.credential_guard(), credential.clone());
        if previous != credential {
            self.inner.unregister(ticket.id, &previous);
            self.inner
                .index()
                .entry(credential)
                .or_default()
                .insert(ticket.id, Arc::downgrade(ticket));
        }
    }

    /// Revokes every session `credential` authenticated; returns how many.
    pub fn revoke(&self, credential: &CredentialId) -> usize {
        let affected = self.inner.sessions_of(credential);
        affected.iter().for_each(|t| t.revoke());
        affected.len()
    }

    /// Revokes the sessions a user's SCRAM credential for `mechanism` authenticated (SCRAM
    /// logins, and PLAIN logins checked against that credential).
    pub fn revoke_user_credential(&self, user: &str, mechanism: ScramMechanism) -> usize {
        self.revoke(&CredentialId::scram(user, mechanism))
    }

    /// Revokes every session authenticated with the delegation token.
    pub fn revoke_token(&self, token_id: &str) -> usize {
        self.revoke(&CredentialId::token(token_id))
    }

    /// Ends the current session of everything the token authenticated no later than
    /// `expiry_ms` (a token whose expiry moved earlier); a later expiry changes nothing now and
    /// applies from the next re-authentication, which reads the token again.
    pub fn token_expiry_changed(&self, token_id: &str, expiry_ms: i64) -> usize {
        let affected = self.inner.sessions_of(&CredentialId::token(token_id));
        affected.iter().for_each(|t| t.cap_deadline(expiry_ms));
        affected.len()
    }

    /// Reacts to a security event (subscribe it to the [`crate::events::EventBus`]); returns how
    /// many sessions were revoked.
    pub fn handle_event(&self, event: &Event) -> usize {
        match event {
            Event::CredentialChanged { user, mechanism } => {
                match ScramMechanism::from_mechanism_name(mechanism) {
                    Some(m) => self.revoke_user_credential(user, m),
                    None => 0,
                }
            }
            Event::TokenExpired { token_id, .. } => self.revoke_token(token_id),
            Event::TokenRenewed {
                token_id,
                expiry_ms,
            } => {
                self.token_expiry_changed(token_id, *expiry_ms);
                0
            }
            Event::CredentialRevoked { credential } => self.revoke(credential),
            _ => 0,
        }
    }

    /// The number of live sessions.
    pub fn len(&self) -> usize {
        self.inner.live.load(Ordering::Acquire)
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::principal::Principal;
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn scram(user: &str, m: ScramMechanism) -> CredentialId {
        CredentialId::scram(user, m)
    }

    #[test]
    fn expiry_is_a_comparison() {
        let s = ReauthScheduler::new();
        let t = s.register(scram("alice", ScramMechanism::Sha512), Some(1_000));
        assert!(!t.is_expired(1_000));
        assert!(t.is_expired(1_001));
        s.renew(&t, Some(5_000), scram("alice", ScramMechanism::Sha512));
        assert!(!t.is_expired(1_001));
        s.renew(&t, None, scram("alice", ScramMechanism::Sha512));
        assert!(!t.is_expired(i64::MAX - 1));
    }

    #[test]
    fn removing_a_credential_revokes_exactly_the_sessions_it_authenticated_and_wakes_them() {
        let s = ReauthScheduler::new();
        let scram512 = s.register(scram("alice", ScramMechanism::Sha512), None);
        // A PLAIN login checked against the SHA-512 credential.
        let plain = s.register(scram("alice", ScramMechanism::Sha512), None);
        let other_mech = s.register(scram("alice", ScramMechanism::Sha256), None);
        let token = s.register(CredentialId::token("tok"), None);
        let bob = s.register(scram("bob", ScramMechanism::Sha512), None);

        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut fut = scram512.revoked();
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
        assert!(scram512.is_revoked() && plain.is_revoked());
        assert!(!other_mech.is_revoked() && !token.is_revoked() && !bob.is_revoked());

        let n = s.handle_event(&Event::TokenExpired {
            token_id: "tok".into(),
            owner: Principal::user("alice"),
            removed: true,
        });
        assert_eq!(n, 1);
        assert!(token.is_revoked());
    }

    #[test]
    fn a_renamed_principal_is_still_revoked_by_its_credential() {
        // What the principal builder made of the login does not matter: the credential does.
        let s = ReauthScheduler::new();
        let t = s.register(scram("alice", ScramMechanism::Sha256), None);
        assert_eq!(s.revoke_user_credential("alice", ScramMechanism::Sha256), 1);
        assert!(t.is_revoked());
    }

    #[test]
    fn plugin_credentials_are_revoked_by_what_the_plugin_reports() {
        let s = ReauthScheduler::new();
        let a = s.register(CredentialId::plugin("DEMO", "key-1"), None);
        let b = s.register(CredentialId::plugin("DEMO", "key-2"), None);
        let n = s.handle_event(&Event::CredentialRevoked {
            credential: CredentialId::plugin("DEMO", "key-1"),
        });
        assert_eq!(n, 1);
        assert!(a.is_revoked() && !b.is_revoked());
    }

    #[test]
    fn a_reauthentication_with_another_credential_moves_the_session() {
        let s = ReauthScheduler::new();
        let t = s.register(CredentialId::token("tok"), Some(10));
        s.renew(&t, Some(20), scram("alice", ScramMechanism::Sha512));
        assert_eq!(s.revoke_token("tok"), 0);
        assert_eq!(s.revoke_user_credential("alice", ScramMechanism::Sha512), 1);
        assert!(t.is_revoked());
    }

    #[test]
    fn a_shortened_token_shortens_its_sessions_and_a_renewal_does_not_extend_them() {
        let s = ReauthScheduler::new();
        let t = s.register(CredentialId::token("tok"), Some(5_000));
        s.handle_event(&Event::TokenRenewed {
            token_id: "tok".into(),
            expiry_ms: 9_000,
        });
        assert_eq!(t.expires_at_ms(), Some(5_000));
        s.handle_event(&Event::TokenRenewed {
            token_id: "tok".into(),
            expiry_ms: 2_000,
        });
        assert_eq!(t.expires_at_ms(), Some(2_000));
        assert!(!t.is_revoked());
    }

    #[test]
    fn dropping_a_ticket_unregisters_it() {
        let s = ReauthScheduler::new();
        let a = s.register(CredentialId::token("t"), None);
        let b = s.register(scram("alice", ScramMechanism::Sha256), None);
        assert_eq!(s.len(), 2);
        drop(a);
        assert_eq!(s.len(), 1);
        assert_eq!(s.revoke_token("t"), 0);
        drop(b);
        assert!(s.is_empty());
        assert!(s.inner.index().is_empty());
    }
}
