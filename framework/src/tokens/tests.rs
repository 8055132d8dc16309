//! The token manager against Kafka's rules (kafka-security-semantics §5), on a real in-memory log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::credentials::{ScramCredential, ScramMechanism, TokenView};
use crate::errors::ErrorCode;
use crate::events::Event;
use crate::principal::Principal;
use crate::secret::Secret;
use crate::store::memory::MemoryStore;
use crate::store::{MetadataStore, StoreError};

const DAY: i64 = 86_400_000;
const T0: i64 = 1_700_000_000_000;

/// Counts derivations; ids from a counter.
#[derive(Default)]
struct Crypto {
    ids: AtomicU64,
    derivations: AtomicU64,
}

impl TokenCrypto for Crypto {
    fn random_id_bytes(&self) -> [u8; 16] {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let mut out = [0x11u8; 16];
        out[..8].copy_from_slice(&n.to_be_bytes());
        out
    }
    fn scram_credential(
        &self,
        _m: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> ScramCredential {
        self.derivations.fetch_add(1, Ordering::Relaxed);
        ScramCredential {
            salt: password.as_bytes().to_vec(),
            stored_key: vec![1],
            server_key: vec![2],
            iterations,
        }
    }
}

struct Fixture {
    store: MemoryStore,
    manager: Arc<TokenManager>,
    crypto: Arc<Crypto>,
    events: Arc<Mutex<Vec<Event>>>,
    now: Arc<AtomicU64>,
}

impl Fixture {
    fn new(config: TokenConfig) -> Self {
        let crypto = Arc::new(Crypto::default());
        let manager = Arc::new(TokenManager::new(config, crypto.clone(), T0));
        let store = MemoryStore::new();
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let now = Arc::new(AtomicU64::new(T0 as u64));
        let (m, e, n) = (manager.clone(), events.clone(), now.clone());
        store
            .subscribe(
                0,
                Box::new(move |records| {
                    let at = n.load(Ordering::Relaxed) as i64;
                    e.lock().unwrap().extend(m.apply(records, at));
                }),
            )
            .unwrap();
        Self {
            store,
            manager,
            crypto,
            events,
            now,
        }
    }

    fn default() -> Self {
        Self::new(TokenConfig::new(Secret::new("s3cret")))
    }

    fn at(&self, ms: i64) {
        self.now.store(ms as u64, Ordering::Relaxed);
    }

    fn create(&self, owner: &str, renewers: &[&str], max: i64, now: i64) -> NewToken {
        self.at(now);
        let token = self
            .manager
            .create(
                &CreateRequest {
                    requester: Principal::user(owner),
                    owner: Principal::user(owner),
                    renewers: renewers
                        .iter()
                        .map(|r| Principal::parse(r).unwrap())
                        .collect(),
                    max_lifetime_ms: max,
                },
                now,
            )
            .unwrap();
        self.store.append_batch(&token.batch).unwrap();
        token
    }

    fn persist(&self, change: &ExpiryChange, now: i64) -> Result<u64, StoreError> {
        self.at(now);
        self.store.append_batch(&change.batch)
    }

    fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

fn user(name: &str) -> Principal {
    Principal::user(name)
}

#[test]
fn create_computes_kafkas_timestamps() {
    let f = Fixture::new(TokenConfig::new(Secret::new("k")).with_times(7 * DAY, DAY, 3_600_000));
    let t = f.create("alice", &[], -1, T0);
    assert_eq!(
        (t.info.issue_ms, t.info.max_ms, t.info.expiry_ms),
        (T0, T0 + 7 * DAY, T0 + DAY)
    );
    // A requested max lifetime shorter than the expiry time caps the expiry too.
    let t = f.create("alice", &[], 1_000, T0);
    assert_eq!((t.info.max_ms, t.info.expiry_ms), (T0 + 1_000, T0 + 1_000));
    // Longer than the server's: the server's wins. Zero means the server's.
    let t = f.create("alice", &[], 30 * DAY, T0);
    assert_eq!(t.info.max_ms, T0 + 7 * DAY);
    let t = f.create("alice", &[], 0, T0);
    assert_eq!(t.info.max_ms, T0 + 7 * DAY);
    // Saturating, like Kafka's `sum`.
    let t = f.create("alice", &[], -1, i64::MAX - 10);
    assert_eq!((t.info.max_ms, t.info.expiry_ms), (i64::MAX, i64::MAX));
    // The HMAC is HMAC-SHA512(secret, id), and the id has Kafka's shape.
    assert_eq!(t.hmac, f.manager.hmac(&t.info.token_id));
    assert!(id::has_token_id_shape(&t.info.token_id));
}

#[test]
fn renewers_must_be_users() {
    let f = Fixture::default();
    let err = f
        .manager
        .create(
            &CreateRequest {
                requester: user("alice"),
                owner: user("alice"),
                renewers: vec![user("bob"), Principal::parse("Group:ops").unwrap()],
                max_lifetime_ms: -1,
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(err, ErrorCode::INVALID_PRINCIPAL_TYPE);
    assert!(f.manager.is_empty());
}

#[test]
fn a_created_token_is_a_view_of_its_record_and_never_stores_the_hmac() {
    let f = Fixture::default();
    let t = f.create("alice", &["User:bob"], -1, T0);
    let info = f.manager.get(&t.info.token_id).unwrap();
    assert_eq!(info.renewers, vec![user("bob")]);
    let log = serde_json::to_string(&f.store.snapshot().unwrap()).unwrap();
    let b64 = id::password(&t.hmac);
    assert!(!log.contains(&b64), "the HMAC was written to the log");
    assert!(matches!(
        f.take_events().as_slice(),
        [Event::TokenCreated { owner, .. }] if *owner == user("alice")
    ));
}

#[test]
fn renew_checks_in_kafkas_order_and_can_shorten() {
    let f = Fixture::new(TokenConfig::new(Secret::new("k")).with_times(7 * DAY, DAY, 3_600_000));
    let t = f.create("alice", &["User:bob"], -1, T0);
    let m = &f.manager;
    assert_eq!(
        m.renew(&user("alice"), &[0u8; 64], 1_000, T0).unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_NOT_FOUND
    );
    assert_eq!(
        m.renew(&user("alice"), &t.hmac[..10], 1_000, T0)
            .unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_NOT_FOUND
    );
    assert_eq!(
        m.renew(&user("mallory"), &t.hmac, 1_000, T0).unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_OWNER_MISMATCH
    );
    // A Group principal named like a renewer is not the renewer.
    assert_eq!(
        m.renew(&Principal::parse("Group:bob").unwrap(), &t.hmac, 1_000, T0)
            .unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_OWNER_MISMATCH
    );
    // The renewer shortens it to one second from now.
    let c = m.renew(&user("bob"), &t.hmac, 1_000, T0 + 10).unwrap();
    assert_eq!(c.expiry_ms, T0 + 10 + 1_000);
    f.persist(&c, T0 + 10).unwrap();
    // Zero or negative periods mean the default; a longer one is capped at it.
    assert_eq!(
        m.renew(&user("alice"), &t.hmac, 0, T0 + 20)
            .unwrap()
            .expiry_ms,
        T0 + 20 + DAY
    );
    assert_eq!(
        m.renew(&user("alice"), &t.hmac, 5 * DAY, T0 + 20)
            .unwrap()
            .expiry_ms,
        T0 + 20 + DAY
    );
    // Expired (expiry < now): EXPIRED comes before the owner check.
    let late = T0 + 10 + 1_001;
    assert_eq!(
        m.renew(&user("mallory"), &t.hmac, 0, late).unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_EXPIRED
    );
    assert!(
        m.renew(&user("alice"), &t.hmac, 0, late - 1).is_ok(),
        "expiry == now is not expired"
    );
}

#[test]
fn the_requester_of_a_token_for_another_owner_cannot_renew_it() {
    let f = Fixture::default();
    f.at(T0);
    let t = f
        .manager
        .create(
            &CreateRequest {
                requester: user("admin"),
                owner: user("alice"),
                renewers: vec![],
                max_lifetime_ms: -1,
            },
            T0,
        )
        .unwrap();
    f.store.append_batch(&t.batch).unwrap();
    assert_eq!(
        f.manager.renew(&user("admin"), &t.hmac, 0, T0).unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_OWNER_MISMATCH
    );
    // …but Describe sees it (owner, requester or renewer).
    assert!(f
        .manager
        .get(&t.info.token_id)
        .unwrap()
        .owner_requester_or_renewer(&user("admin")));
}

#[test]
fn expire_with_a_negative_period_removes_at_once_even_when_expired() {
    let f = Fixture::default();
    let t = f.create("alice", &[], 1_000, T0);
    let later = T0 + 5_000; // expired
    assert_eq!(
        f.manager
            .expire(&user("mallory"), &t.hmac, -1, later)
            .unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_OWNER_MISMATCH
    );
    let c = f
        .manager
        .expire(&user("alice"), &t.hmac, -1, later)
        .unwrap();
    assert_eq!(c.expiry_ms, later);
    f.take_events();
    f.persist(&c, later).unwrap();
    assert!(f.manager.get(&t.info.token_id).is_none());
    assert!(matches!(
        f.take_events().as_slice(),
        [Event::TokenExpired { removed: true, .. }]
    ));
    assert_eq!(
        f.manager
            .expire(&user("alice"), &t.hmac, -1, later)
            .unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_NOT_FOUND
    );
}

#[test]
fn expire_can_extend_up_to_max_and_zero_expires_now() {
    let f = Fixture::new(TokenConfig::new(Secret::new("k")).with_times(7 * DAY, DAY, 3_600_000));
    let t = f.create("alice", &[], -1, T0);
    let c = f
        .manager
        .expire(&user("alice"), &t.hmac, 3 * DAY, T0)
        .unwrap();
    assert_eq!(c.expiry_ms, T0 + 3 * DAY, "expire extended the token");
    let c = f
        .manager
        .expire(&user("alice"), &t.hmac, 30 * DAY, T0)
        .unwrap();
    assert_eq!(c.expiry_ms, T0 + 7 * DAY, "…but not past its max");
    f.take_events();
    let c = f.manager.expire(&user("alice"), &t.hmac, 0, T0).unwrap();
    assert_eq!(c.expiry_ms, T0);
    f.persist(&c, T0 + 1).unwrap();
    // Expired (expiry < now), not yet swept: it stays until the sweep, and cannot be renewed.
    assert!(matches!(
        f.take_events().as_slice(),
        [Event::TokenExpired { removed: false, .. }]
    ));
    assert_eq!(
        f.manager
            .renew(&user("alice"), &t.hmac, 0, T0 + 1)
            .unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_EXPIRED
    );
    assert_eq!(
        f.manager
            .expire(&user("alice"), &t.hmac, 10, T0 + 1)
            .unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_EXPIRED
    );
}

#[test]
fn a_decision_on_a_stale_view_is_not_written() {
    let f = Fixture::default();
    let t = f.create("alice", &[], -1, T0);
    let renewal = f.manager.renew(&user("alice"), &t.hmac, 0, T0).unwrap();
    let removal = f.manager.expire(&user("alice"), &t.hmac, -1, T0).unwrap();
    f.persist(&removal, T0).unwrap();
    // Writing the renewal now would resurrect the removed token.
    assert!(matches!(
        f.persist(&renewal, T0),
        Err(StoreError::Conflict { .. })
    ));
    assert!(f.manager.get(&t.info.token_id).is_none());
}

#[test]
fn the_sweep_runs_on_its_interval_and_removes_only_expired_tokens() {
    let f = Fixture::new(TokenConfig::new(Secret::new("k")).with_times(7 * DAY, DAY, 60_000));
    let short = f.create("alice", &[], 1_000, T0);
    let long = f.create("bob", &[], -1, T0);
    assert_eq!(f.manager.poll_timeout(), T0 + 60_000);
    assert!(f.manager.on_timeout(T0 + 59_999).is_empty());
    let batches = f.manager.on_timeout(T0 + 60_000);
    assert_eq!(f.manager.poll_timeout(), T0 + 120_000);
    assert_eq!(batches.len(), 1);
    for b in &batches {
        f.store.append_batch(b).unwrap();
    }
    assert!(f.manager.get(&short.info.token_id).is_none());
    assert!(f.manager.get(&long.info.token_id).is_some());
}

#[test]
fn scram_credentials_are_derived_once_per_mechanism_from_the_base64_hmac() {
    let f = Fixture::default();
    let t = f.create("alice", &[], -1, T0);
    let id = &t.info.token_id;
    let c1 = f.manager.token(id, ScramMechanism::Sha512).unwrap();
    let c2 = f.manager.token(id, ScramMechanism::Sha512).unwrap();
    assert_eq!(f.crypto.derivations.load(Ordering::Relaxed), 1);
    assert_eq!(c1.credential, c2.credential);
    assert_eq!(
        c1.credential.salt,
        id::password(&t.hmac).into_bytes(),
        "derived from base64(hmac)"
    );
    assert_eq!(c1.credential.iterations, 4096);
    assert_eq!(c1.owner_name, "alice");
    f.manager.token(id, ScramMechanism::Sha256).unwrap();
    assert_eq!(f.crypto.derivations.load(Ordering::Relaxed), 2);
    // A renewal keeps the derived credentials and reports the new expiry.
    let c = f.manager.renew(&user("alice"), &t.hmac, 1_000, T0).unwrap();
    f.persist(&c, T0).unwrap();
    let after = f.manager.token(id, ScramMechanism::Sha512).unwrap();
    assert_eq!(after.expiry_ms, T0 + 1_000);
    assert_eq!(f.crypto.derivations.load(Ordering::Relaxed), 2);
    assert!(f
        .manager
        .token("no-such-token", ScramMechanism::Sha512)
        .is_none());
}

#[test]
fn tokens_without_the_extension_only_when_opted_in_and_only_for_token_shaped_names() {
    let off = Fixture::default();
    let t = off.create("alice", &[], -1, T0);
    assert!(!off
        .manager
        .accepts_token_without_extension(&t.info.token_id));
    let on =
        Fixture::new(TokenConfig::new(Secret::new("k")).with_accept_token_without_extension(true));
    let t = on.create("alice", &[], -1, T0);
    assert!(on.manager.accepts_token_without_extension(&t.info.token_id));
    assert!(!on.manager.accepts_token_without_extension("alice"));
}

#[test]
fn replaying_the_log_rebuilds_the_same_tokens_on_another_node() {
    let f = Fixture::default();
    let a = f.create("alice", &["User:bob"], -1, T0);
    let b = f.create("bob", &[], -1, T0);
    let c = f.manager.expire(&user("bob"), &b.hmac, -1, T0).unwrap();
    f.persist(&c, T0).unwrap();
    // Another node with the same secret, fed the same log, knows the same tokens and HMACs.
    let replayed = TokenManager::new(
        TokenConfig::new(Secret::new("s3cret")),
        Arc::new(Crypto::default()),
        T0,
    );
    let all: Vec<_> = f
        .store
        .snapshot()
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, record)| crate::store::StoredRecord {
            offset: i as u64,
            record,
        })
        .collect();
    replayed.apply(&all, T0);
    assert_eq!(replayed.len(), 1);
    assert!(
        replayed.renew(&user("bob"), &a.hmac, 0, T0).is_ok(),
        "the renewer can renew on the other node: same HMAC"
    );
    // A node with another secret cannot find it by HMAC.
    let wrong = TokenManager::new(
        TokenConfig::new(Secret::new("other")),
        Arc::new(Crypto::default()),
        T0,
    );
    wrong.apply(&all, T0);
    assert_eq!(
        wrong.renew(&user("alice"), &a.hmac, 0, T0).unwrap_err(),
        ErrorCode::DELEGATION_TOKEN_NOT_FOUND
    );
}
