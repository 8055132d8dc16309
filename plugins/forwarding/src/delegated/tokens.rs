//! The upstream delegation tokens of the `delegated` policy, as a sans-I/O state machine: one
//! token per client principal, created once however many connections ask at the same time,
//! renewed before it expires, replaced before its maximum lifetime ends, expired upstream when
//! the principal has had no connection for `idle_expire_ms`, when its credential is revoked, and
//! at shutdown.
//!
//! The host owns the I/O: it asks [`UpstreamTokens::acquire`] when a connection needs the
//! principal's token, carries out the [`Work`] the machine hands out (CreateDelegationToken,
//! RenewDelegationToken, ExpireDelegationToken as Portcullis' service principal) and reports the
//! outcome back. Time is passed in (ms since the epoch), so every transition is unit-tested.
//!
//! Per principal:
//!
//! ```text
//! (absent) ──acquire──► Creating ──created(Ok)──► Ready ──renew due──► Ready(renewing) ──renewed──► Ready
//!                          │                        │  ──max near──► Ready(replacing) ──created──► Ready(new token)
//!                          └──created(Err)──► (absent; the waiters get the error)
//!                                                   └──idle / revoked / shutdown──► (absent; token handed out to expire)
//! ```
//!
//! Every creation has a [`CreationId`]. A creation whose principal was removed while it was in
//! flight (revoked, or the node stopping) is *orphaned*: its token, when it arrives, is handed out
//! to expire instead of being installed — otherwise a token created for a revoked principal, or
//! one that arrives after the shutdown drained the cache, would live upstream until its maximum
//! lifetime with nobody to expire it. After [`UpstreamTokens::drain`] the cache is closed: no new
//! creation starts.

use std::collections::BTreeMap;
use std::sync::Arc;

use portcullis::login::ExpiringCredential;
use portcullis::principal::Principal;
use portcullis::refresh::{next_refresh, NextRefresh, RefreshConfig};
use portcullis::secret::Secret;

/// A delegation token owned by a client principal, as the upstream returned it.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamToken {
    /// The token id (the SCRAM user name with `tokenauth=true`).
    pub token_id: String,
    /// The token's HMAC (its SCRAM password is the standard Base64 of these bytes).
    pub hmac: Vec<u8>,
    /// When the token was issued, ms since the epoch.
    pub issued_ms: i64,
    /// When it expires unless renewed.
    pub expiry_ms: i64,
    /// When it expires whatever happens (its maximum lifetime).
    pub max_ms: i64,
}

impl UpstreamToken {
    /// The SCRAM password of the token: standard Base64 (with padding) of the HMAC.
    pub fn scram_password(&self) -> Secret {
        Secret::new(base64_standard(&self.hmac))
    }
}

impl std::fmt::Debug for UpstreamToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The HMAC is the token's password: never printed.
        f.debug_struct("UpstreamToken")
            .field("token_id", &self.token_id)
            .field("expiry_ms", &self.expiry_ms)
            .field("max_ms", &self.max_ms)
            .finish_non_exhaustive()
    }
}

/// Names one creation, so that its outcome is recognised when it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CreationId(u64);

/// What the host must do for the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Create a token owned by `principal` (report with [`UpstreamTokens::created`]).
    Create {
        /// The owner.
        principal: Principal,
        /// The creation, to name in the report.
        id: CreationId,
    },
    /// Renew the principal's token (report with [`UpstreamTokens::renewed`]).
    Renew {
        /// The owner.
        principal: Principal,
        /// The token.
        token: Arc<UpstreamToken>,
    },
    /// Expire this token upstream at once; nothing to report.
    Expire {
        /// The owner.
        principal: Principal,
        /// The token.
        token: Arc<UpstreamToken>,
        /// Why (for the log).
        reason: ExpireReason,
    },
}

/// Why a token is expired upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpireReason {
    /// The principal had no connection for `idle_expire_ms`.
    Idle,
    /// The principal's credential was removed or changed.
    Revoked,
    /// Portcullis is shutting down.
    Shutdown,
    /// A newer token replaced it.
    Replaced,
}

/// What [`UpstreamTokens::acquire`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The principal's token; a lease is held until [`UpstreamTokens::release`].
    Ready(Arc<UpstreamToken>),
    /// The caller must create the token (it is the only one told so) and report it with this id.
    Create(CreationId),
    /// Another caller is creating it: wait for [`UpstreamTokens::created`] and ask again.
    Wait,
    /// The node is stopping ([`UpstreamTokens::drain`] ran): no token, and none is created.
    Closed,
}

/// The settings the machine needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenPolicy {
    /// How long a principal may have no connection before its token is expired.
    pub idle_expire_ms: i64,
    /// When to renew (Kafka's login refresh rules).
    pub refresh: RefreshConfig,
}

#[derive(Debug)]
struct Entry {
    state: State,
    /// Connections holding the token.
    leases: usize,
    /// When the last lease was released (None while leased or never leased).
    idle_since_ms: Option<i64>,
    /// The creation in flight for this principal (the first token, or a replacement).
    creating: Option<CreationId>,
}

#[derive(Debug)]
enum State {
    Creating,
    Ready {
        token: Arc<UpstreamToken>,
        /// When to renew or replace.
        due_ms: i64,
        /// A renewal or a replacement is in flight.
        busy: bool,
        /// The token cannot be renewed past its maximum: replace it at `due_ms`.
        replace: bool,
    },
}

/// Every principal's upstream token on this node.
#[derive(Debug)]
pub struct UpstreamTokens {
    policy: TokenPolicy,
    entries: BTreeMap<Principal, Entry>,
    next_creation: u64,
    /// Creations in flight whose principal was removed, with why (their tokens get expired).
    orphaned: BTreeMap<CreationId, ExpireReason>,
    /// [`UpstreamTokens::drain`] ran.
    closed: bool,
}

impl UpstreamTokens {
    /// An empty cache.
    pub fn new(policy: TokenPolicy) -> Self {
        Self {
            policy,
            entries: BTreeMap::new(),
            next_creation: 0,
            orphaned: BTreeMap::new(),
            closed: false,
        }
    }

    fn new_creation(&mut self) -> CreationId {
        self.next_creation += 1;
        CreationId(self.next_creation)
    }

    /// Whether [`UpstreamTokens::drain`] ran (the node is stopping).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// A connection of `principal` needs its token. `Ready` takes a lease.
    pub fn acquire(&mut self, principal: &Principal) -> Acquire {
        if self.closed {
            return Acquire::Closed;
        }
        match self.entries.get_mut(principal) {
            None => {
                let id = self.new_creation();
                self.entries.insert(
                    principal.clone(),
                    Entry {
                        state: State::Creating,
                        leases: 0,
                        idle_since_ms: None,
                        creating: Some(id),
                    },
                );
                Acquire::Create(id)
            }
            Some(entry) => {
                let token = match &entry.state {
                    State::Creating => return Acquire::Wait,
                    State::Ready { token, .. } => Arc::clone(token),
                };
                entry.leases += 1;
                entry.idle_since_ms = None;
                Acquire::Ready(token)
            }
        }
    }

    /// A connection of `principal` that held a lease has closed.
    pub fn release(&mut self, principal: &Principal, now_ms: i64) {
        if let Some(entry) = self.entries.get_mut(principal) {
            entry.leases = entry.leases.saturating_sub(1);
            if entry.leases == 0 {
                entry.idle_since_ms = Some(now_ms);
            }
        }
    }

    /// The outcome of creation `id` ([`Work::Create`] or [`Acquire::Create`]). On failure the
    /// entry is dropped, so the next connection tries again. Returns the token to expire: the one
    /// it replaces, or the new one itself when its creation was orphaned.
    pub fn created(
        &mut self,
        principal: &Principal,
        id: CreationId,
        outcome: Result<UpstreamToken, ()>,
        now_ms: i64,
        random: f64,
    ) -> Option<Work> {
        let current = self
            .entries
            .get(principal)
            .is_some_and(|entry| entry.creating == Some(id));
        if !current {
            // Orphaned (the principal was revoked, or the node is stopping): the token must not
            // be installed, and nobody else knows it exists.
            let reason = self.orphaned.remove(&id).unwrap_or(ExpireReason::Revoked);
            return outcome.ok().map(|token| Work::Expire {
                principal: principal.clone(),
                token: Arc::new(token),
                reason,
            });
        }
        let token = match outcome {
            Ok(token) => Arc::new(token),
            Err(()) => {
                // A failed replacement keeps the old token (it is still valid) and retries.
                if let Some(entry) = self.entries.get_mut(principal) {
                    entry.creating = None;
                    match &mut entry.state {
                        State::Ready { busy, due_ms, .. } => {
                            *busy = false;
                            *due_ms = now_ms + portcullis::refresh::RETRY_MS;
                        }
                        State::Creating => {
                            self.entries.remove(principal);
                        }
                    }
                }
                return None;
            }
        };
        let (due_ms, replace) = self.schedule(&token, now_ms, random);
        let Some(entry) = self.entries.get_mut(principal) else {
            return None; // checked above
        };
        entry.creating = None;
        if entry.leases == 0 && entry.idle_since_ms.is_none() {
            entry.idle_since_ms = Some(now_ms);
        }
        let old = std::mem::replace(
            &mut entry.state,
            State::Ready {
                token,
                due_ms,
                busy: false,
                replace,
            },
        );
        match old {
            State::Ready { token, .. } => Some(Work::Expire {
                principal: principal.clone(),
                token,
                reason: ExpireReason::Replaced,
            }),
            State::Creating => None,
        }
    }

    /// The outcome of a [`Work::Renew`]: the new expiry, or a failure (retried after
    /// [`portcullis::refresh::RETRY_MS`], or replaced when the token is gone upstream).
    pub fn renewed(
        &mut self,
        principal: &Principal,
        token_id: &str,
        outcome: RenewOutcome,
        now_ms: i64,
        random: f64,
    ) {
        let policy = self.policy;
        let Some(entry) = self.entries.get_mut(principal) else {
            return;
        };
        let State::Ready {
            token,
            due_ms,
            busy,
            replace,
        } = &mut entry.state
        else {
            return;
        };
        if token.token_id != token_id {
            return;
        }
        *busy = false;
        match outcome {
            RenewOutcome::Renewed { expiry_ms } => {
                let mut renewed = UpstreamToken::clone(token);
                renewed.expiry_ms = expiry_ms;
                let renewed = Arc::new(renewed);
                let (due, rep) = schedule(&policy, &renewed, now_ms, random);
                *token = renewed;
                *due_ms = due;
                *replace = rep;
            }
            RenewOutcome::Failed => *due_ms = now_ms + portcullis::refresh::RETRY_MS,
            RenewOutcome::Gone => {
                *replace = true;
                *due_ms = now_ms;
            }
        }
    }

    /// What is due at `now_ms`: renewals, replacements, and idle tokens to expire (removed from
    /// the cache now, so no new connection gets them).
    pub fn poll(&mut self, now_ms: i64) -> Vec<Work> {
        let idle_expire_ms = self.policy.idle_expire_ms;
        let mut work = Vec::new();
        let mut idle = Vec::new();
        for (principal, entry) in &mut self.entries {
            if entry.leases == 0
                && entry
                    .idle_since_ms
                    .is_some_and(|since| now_ms.saturating_sub(since) >= idle_expire_ms)
            {
                if let State::Ready { .. } = entry.state {
                    idle.push(principal.clone());
                }
                continue;
            }
            if let State::Ready {
                token,
                due_ms,
                busy,
                replace,
            } = &mut entry.state
            {
                if !*busy && now_ms >= *due_ms {
                    *busy = true;
                    work.push(if *replace {
                        self.next_creation += 1;
                        let id = CreationId(self.next_creation);
                        entry.creating = Some(id);
                        Work::Create {
                            principal: principal.clone(),
                            id,
                        }
                    } else {
                        Work::Renew {
                            principal: principal.clone(),
                            token: Arc::clone(token),
                        }
                    });
                }
            }
        }
        for principal in idle {
            if let Some(work_item) = self.remove(&principal, ExpireReason::Idle) {
                work.push(work_item);
            }
        }
        work
    }

    /// When [`UpstreamTokens::poll`] has something to do next (None: nothing cached).
    pub fn next_deadline(&self) -> Option<i64> {
        self.entries
            .values()
            .filter_map(|entry| {
                let idle = (entry.leases == 0)
                    .then_some(entry.idle_since_ms)
                    .flatten()
                    .map(|since| since.saturating_add(self.policy.idle_expire_ms));
                let due = match &entry.state {
                    State::Ready {
                        due_ms,
                        busy: false,
                        ..
                    } => Some(*due_ms),
                    _ => None,
                };
                match (idle, due) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    /// The principal's credential was removed or changed: its token is dropped from the cache
    /// and handed out to expire.
    pub fn revoke(&mut self, principal: &Principal) -> Option<Work> {
        self.remove(principal, ExpireReason::Revoked)
    }

    /// Shutdown: every token, to expire. The cache is closed: no creation starts after this,
    /// and the tokens of creations still in flight are handed out to expire when they arrive.
    pub fn drain(&mut self) -> Vec<Work> {
        self.closed = true;
        let principals: Vec<Principal> = self.entries.keys().cloned().collect();
        principals
            .iter()
            .filter_map(|p| self.remove(p, ExpireReason::Shutdown))
            .collect()
    }

    /// The principal's current token, without taking a lease (re-authentication of an open
    /// connection uses the newest token).
    pub fn current(&self, principal: &Principal) -> Option<Arc<UpstreamToken>> {
        match &self.entries.get(principal)?.state {
            State::Ready { token, .. } => Some(Arc::clone(token)),
            State::Creating => None,
        }
    }

    /// How many principals have a token or one being created.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no principal has a token.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn remove(&mut self, principal: &Principal, reason: ExpireReason) -> Option<Work> {
        let entry = self.entries.remove(principal)?;
        if let Some(id) = entry.creating {
            self.orphaned.insert(id, reason);
        }
        match entry.state {
            State::Ready { token, .. } => Some(Work::Expire {
                principal: principal.clone(),
                token,
                reason,
            }),
            // Being created: orphaned above; `created` hands its token out to expire.
            State::Creating => None,
        }
    }

    fn schedule(&self, token: &UpstreamToken, now_ms: i64, random: f64) -> (i64, bool) {
        schedule(&self.policy, token, now_ms, random)
    }
}

/// The outcome of a renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenewOutcome {
    /// Renewed until `expiry_ms`.
    Renewed {
        /// The new expiry.
        expiry_ms: i64,
    },
    /// A transient failure: try again later.
    Failed,
    /// The upstream no longer knows the token (or it expired): create a new one.
    Gone,
}

/// When to act on `token`, and whether that is a replacement (the token cannot be renewed past
/// its maximum lifetime) rather than a renewal. Kafka's login refresh rules decide the time.
fn schedule(policy: &TokenPolicy, token: &UpstreamToken, now_ms: i64, random: f64) -> (i64, bool) {
    // Once the expiry is the maximum lifetime, renewing cannot extend it: replace the token at the
    // point of its life a renewal would have come.
    let replace = token.expiry_ms >= token.max_ms;
    let credential = ExpiringCredential::expiring("token", token.issued_ms, token.expiry_ms);
    match next_refresh(&policy.refresh, Some(&credential), now_ms, random) {
        NextRefresh::At(at) => (at, replace),
        NextRefresh::Stop => (now_ms, replace),
    }
}

fn base64_standard(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> TokenPolicy {
        TokenPolicy {
            idle_expire_ms: 1_000,
            refresh: RefreshConfig::default(),
        }
    }

    fn token(id: &str, issued: i64, expiry: i64, max: i64) -> UpstreamToken {
        UpstreamToken {
            token_id: id.into(),
            hmac: vec![1, 2, 3],
            issued_ms: issued,
            expiry_ms: expiry,
            max_ms: max,
        }
    }

    /// The id of the creation `acquire` asks the caller to make.
    fn must_create(cache: &mut UpstreamTokens, principal: &Principal) -> CreationId {
        match cache.acquire(principal) {
            Acquire::Create(id) => id,
            other => panic!("expected Create, got {other:?}"),
        }
    }

    /// Creates the principal's first token.
    fn install(cache: &mut UpstreamTokens, principal: &Principal, t: UpstreamToken, now: i64) {
        let id = must_create(cache, principal);
        assert_eq!(cache.created(principal, id, Ok(t), now, 0.0), None);
    }

    #[test]
    fn concurrent_acquires_create_once() {
        let mut cache = UpstreamTokens::new(policy());
        let alice = Principal::user("alice");
        let id = must_create(&mut cache, &alice);
        for _ in 0..49 {
            assert_eq!(cache.acquire(&alice), Acquire::Wait);
        }
        assert_eq!(
            cache.created(&alice, id, Ok(token("t1", 0, 100_000, 200_000)), 0, 0.5),
            None
        );
        for _ in 0..50 {
            assert!(matches!(cache.acquire(&alice), Acquire::Ready(t) if t.token_id == "t1"));
        }
    }

    #[test]
    fn a_failed_creation_lets_the_next_caller_try_again() {
        let mut cache = UpstreamTokens::new(policy());
        let alice = Principal::user("alice");
        let id = must_create(&mut cache, &alice);
        assert_eq!(cache.created(&alice, id, Err(()), 0, 0.5), None);
        must_create(&mut cache, &alice);
    }

    #[test]
    fn renews_before_expiry_then_replaces_before_the_maximum() {
        let mut cache = UpstreamTokens::new(policy());
        let alice = Principal::user("alice");
        install(&mut cache, &alice, token("t1", 0, 10_000, 30_000), 0);
        let _ = cache.acquire(&alice);
        // 80 % of the 10 s expiry (too short for the 60 s / 300 s buffers).
        assert_eq!(cache.next_deadline(), Some(8_000));
        assert!(cache.poll(7_999).is_empty());
        let work = cache.poll(8_000);
        assert!(matches!(&work[..], [Work::Renew { token, .. }] if token.token_id == "t1"));
        assert!(cache.poll(8_001).is_empty(), "one renewal in flight");
        cache.renewed(
            &alice,
            "t1",
            RenewOutcome::Renewed { expiry_ms: 30_000 },
            8_000,
            0.0,
        );
        // Expiry is now the maximum: the next step is a replacement, not a renewal.
        let work = cache.poll(30_000);
        let [Work::Create { principal, id }] = &work[..] else {
            panic!("expected one Create, got {work:?}");
        };
        assert_eq!(principal, &alice);
        let replaced = cache.created(
            &alice,
            *id,
            Ok(token("t2", 28_000, 40_000, 60_000)),
            28_000,
            0.0,
        );
        assert!(
            matches!(replaced, Some(Work::Expire { token, reason: ExpireReason::Replaced, .. }) if token.token_id == "t1")
        );
        assert_eq!(
            cache.current(&alice).map(|t| t.token_id.clone()),
            Some("t2".into())
        );
    }

    #[test]
    fn idle_principals_lose_their_token() {
        let mut cache = UpstreamTokens::new(policy());
        let alice = Principal::user("alice");
        install(&mut cache, &alice, token("t1", 0, 1_000_000, 2_000_000), 0);
        let _ = cache.acquire(&alice);
        let _ = cache.acquire(&alice);
        cache.release(&alice, 100);
        assert!(cache.poll(5_000).is_empty(), "one connection still open");
        cache.release(&alice, 5_000);
        assert!(cache.poll(5_999).is_empty());
        let work = cache.poll(6_000);
        assert!(matches!(
            &work[..],
            [Work::Expire {
                reason: ExpireReason::Idle,
                ..
            }]
        ));
        assert!(cache.is_empty());
    }

    #[test]
    fn revocation_and_shutdown_hand_out_the_tokens() {
        let mut cache = UpstreamTokens::new(policy());
        for name in ["a", "b", "c"] {
            let p = Principal::user(name);
            install(&mut cache, &p, token(name, 0, 1_000_000, 2_000_000), 0);
        }
        assert!(matches!(
            cache.revoke(&Principal::user("b")),
            Some(Work::Expire {
                reason: ExpireReason::Revoked,
                ..
            })
        ));
        assert_eq!(cache.revoke(&Principal::user("b")), None);
        assert_eq!(cache.drain().len(), 2);
        assert!(cache.is_empty());
    }

    #[test]
    fn a_token_created_after_its_principal_was_revoked_is_expired_not_installed() {
        let mut cache = UpstreamTokens::new(policy());
        let alice = Principal::user("alice");
        let first = must_create(&mut cache, &alice);
        assert_eq!(cache.revoke(&alice), None, "nothing to expire yet");
        // A new session of alice (new credential) starts its own creation meanwhile.
        let second = must_create(&mut cache, &alice);
        let orphan = cache.created(&alice, first, Ok(token("t1", 0, 10_000, 30_000)), 0, 0.0);
        assert!(
            matches!(&orphan, Some(Work::Expire { token, reason: ExpireReason::Revoked, .. }) if token.token_id == "t1"),
            "{orphan:?}"
        );
        assert_eq!(
            cache.acquire(&alice),
            Acquire::Wait,
            "the second is still in flight"
        );
        assert_eq!(
            cache.created(&alice, second, Ok(token("t2", 0, 10_000, 30_000)), 0, 0.0),
            None
        );
        assert_eq!(
            cache.current(&alice).map(|t| t.token_id.clone()),
            Some("t2".into())
        );
    }

    #[test]
    fn a_replacement_in_flight_when_revoked_is_expired_when_it_arrives() {
        let mut cache = UpstreamTokens::new(policy());
        let alice = Principal::user("alice");
        install(&mut cache, &alice, token("t1", 0, 30_000, 30_000), 0);
        let _ = cache.acquire(&alice);
        let work = cache.poll(30_000);
        let [Work::Create { id, .. }] = &work[..] else {
            panic!("expected a replacement, got {work:?}");
        };
        assert!(matches!(
            cache.revoke(&alice),
            Some(Work::Expire { reason: ExpireReason::Revoked, token, .. }) if token.token_id == "t1"
        ));
        let late = cache.created(&alice, *id, Ok(token("t2", 0, 60_000, 60_000)), 30_000, 0.0);
        assert!(matches!(
            late,
            Some(Work::Expire { reason: ExpireReason::Revoked, token, .. }) if token.token_id == "t2"
        ));
        assert!(cache.is_empty());
    }

    #[test]
    fn after_the_drain_nothing_is_created_and_late_tokens_are_expired() {
        let mut cache = UpstreamTokens::new(policy());
        let (alice, bob) = (Principal::user("alice"), Principal::user("bob"));
        install(&mut cache, &alice, token("t1", 0, 30_000, 30_000), 0);
        let _ = cache.acquire(&alice);
        let bobs = must_create(&mut cache, &bob);
        let work = cache.poll(30_000);
        let [Work::Create {
            id: replacement, ..
        }] = &work[..]
        else {
            panic!("expected a replacement, got {work:?}");
        };
        let drained = cache.drain();
        assert!(
            matches!(&drained[..], [Work::Expire { reason: ExpireReason::Shutdown, token, .. }] if token.token_id == "t1"),
            "{drained:?}"
        );
        assert!(cache.is_closed());
        assert_eq!(cache.acquire(&Principal::user("carol")), Acquire::Closed);
        for (principal, id, name) in [(&alice, *replacement, "t2"), (&bob, bobs, "b1")] {
            let late = cache.created(
                principal,
                id,
                Ok(token(name, 0, 60_000, 60_000)),
                30_000,
                0.0,
            );
            assert!(
                matches!(&late, Some(Work::Expire { reason: ExpireReason::Shutdown, token, .. }) if token.token_id == name),
                "{late:?}"
            );
        }
        assert!(cache.is_empty());
        // A failed creation after the drain has nothing to expire.
        assert_eq!(cache.created(&bob, bobs, Err(()), 30_000, 0.0), None);
    }

    #[test]
    fn the_scram_password_is_the_standard_base64_of_the_hmac() {
        let t = UpstreamToken {
            hmac: b"any carnal pleas".to_vec(),
            ..token("t", 0, 0, 0)
        };
        assert_eq!(t.scram_password().expose(), "YW55IGNhcm5hbCBwbGVhcw==");
        let t = UpstreamToken {
            hmac: b"ab".to_vec(),
            ..token("t", 0, 0, 0)
        };
        assert_eq!(t.scram_password().expose(), "YWI=");
    }
}
