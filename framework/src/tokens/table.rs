//! The node's tokens: a view of the metadata log, applied record by record.
//!
//! Each node recomputes a token's HMAC from its id and the shared secret when it applies the
//! token's record (the HMAC is never stored), and derives the token's SCRAM credentials — one per
//! mechanism, with a salt of its own — the first time a client authenticates with it (Kafka
//! derives them eagerly; 4096 PBKDF2 rounds per mechanism per token would make replaying a million
//! tokens take minutes).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::credentials::{ScramCredential, ScramMechanism};
use crate::events::Event;
use crate::principal::Principal;
use crate::store::{DelegationTokenRecord, MetadataRecord, Offset, StoredRecord};

use super::id::{TokenHmac, HMAC_LEN};

/// A delegation token as the node knows it (Kafka's `TokenInformation`), with the offset of the
/// record it comes from (its version, for conditional writes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    /// The token id.
    pub token_id: String,
    /// The owner.
    pub owner: Principal,
    /// Who asked for it.
    pub requester: Principal,
    /// Who may renew and expire it besides the owner.
    pub renewers: Vec<Principal>,
    /// When it was issued (ms since the epoch).
    pub issue_ms: i64,
    /// The latest expiry a renewal can give it.
    pub max_ms: i64,
    /// When it expires unless renewed.
    pub expiry_ms: i64,
    /// The offset of its latest record.
    pub offset: Offset,
}

impl TokenInfo {
    /// Kafka's check for renew and expire: the owner or a renewer (type and name compared).
    pub fn may_renew(&self, principal: &Principal) -> bool {
        self.owner == *principal || self.renewers.iter().any(|r| r == principal)
    }

    /// Kafka's `ownerOrRenewer`: the owner, the requester or a renewer (Describe uses it).
    pub fn owner_requester_or_renewer(&self, principal: &Principal) -> bool {
        self.owner == *principal
            || self.requester == *principal
            || self.renewers.iter().any(|r| r == principal)
    }

    /// Kafka's expiry test: `maxTimestamp < now || expiryTimestamp < now`.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.max_ms < now_ms || self.expiry_ms < now_ms
    }

    /// The record that stores this token with `expiry_ms` as its expiry.
    pub fn record_with_expiry(&self, expiry_ms: i64) -> MetadataRecord {
        MetadataRecord::DelegationToken(DelegationTokenRecord {
            token_id: self.token_id.clone(),
            owner: self.owner.to_string(),
            requester: self.requester.to_string(),
            renewers: self.renewers.iter().map(ToString::to_string).collect(),
            issue_timestamp_ms: self.issue_ms,
            max_timestamp_ms: self.max_ms,
            expiry_timestamp_ms: expiry_ms,
        })
    }

    fn from_record(record: &DelegationTokenRecord, offset: Offset) -> Option<Self> {
        let renewers: Option<Vec<Principal>> = record
            .renewers
            .iter()
            .map(|r| Principal::parse(r).ok())
            .collect();
        Some(Self {
            token_id: record.token_id.clone(),
            owner: Principal::parse(&record.owner).ok()?,
            requester: Principal::parse(&record.requester).ok()?,
            renewers: renewers?,
            issue_ms: record.issue_timestamp_ms,
            max_ms: record.max_timestamp_ms,
            expiry_ms: record.expiry_timestamp_ms,
            offset,
        })
    }
}

/// One token and what the node computed for it.
pub(crate) struct Entry {
    pub(crate) info: TokenInfo,
    pub(crate) hmac: [u8; HMAC_LEN],
    /// SCRAM-SHA-256 and SCRAM-SHA-512 credentials, derived on first use.
    scram: [OnceLock<ScramCredential>; 2],
}

impl Entry {
    /// The token's credential for `mechanism`, derived with `derive` the first time.
    pub(crate) fn scram(
        &self,
        mechanism: ScramMechanism,
        derive: impl FnOnce() -> ScramCredential,
    ) -> ScramCredential {
        let slot = match mechanism {
            ScramMechanism::Sha256 => &self.scram[0],
            ScramMechanism::Sha512 => &self.scram[1],
        };
        slot.get_or_init(derive).clone()
    }
}

/// The first 16 bytes of an HMAC: enough to find a token (the full HMAC is compared after).
fn hmac_key(hmac: &[u8]) -> u128 {
    let mut key = [0u8; 16];
    for (k, b) in key.iter_mut().zip(hmac) {
        *k = *b;
    }
    u128::from_be_bytes(key)
}

#[derive(Default)]
struct Tokens {
    by_id: HashMap<Arc<str>, Arc<Entry>>,
    /// HMAC prefix → token id (Kafka keeps base64(hmac) → id for renew and expire).
    by_hmac: HashMap<u128, Arc<str>, HmacPrefixHash>,
}

/// Hashes an HMAC prefix by taking its low 64 bits: HMAC output is uniformly distributed and
/// unpredictable without the secret, so nobody can aim collisions at the map, and the SipHash the
/// default hasher would run on a million of them at start-up is wasted work.
#[derive(Clone, Copy, Default)]
struct HmacPrefixHash;

impl std::hash::BuildHasher for HmacPrefixHash {
    type Hasher = PrefixHasher;
    fn build_hasher(&self) -> PrefixHasher {
        PrefixHasher(0)
    }
}

struct PrefixHasher(u64);

impl std::hash::Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u128 keys reach this hasher (through `write_u128`); fold anything else in.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

/// Every token of the node. Readers (SASL lookups, Describe) share a read lock; the log applier
/// takes the write lock per batch.
pub(crate) struct TokenTable {
    hmac: TokenHmac,
    tokens: RwLock<Tokens>,
}

impl TokenTable {
    pub(crate) fn new(hmac: TokenHmac) -> Self {
        Self {
            hmac,
            tokens: RwLock::new(Tokens::default()),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Tokens> {
        self.tokens.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Tokens> {
        self.tokens.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn hmac(&self) -> &TokenHmac {
        &self.hmac
    }

    pub(crate) fn get(&self, token_id: &str) -> Option<Arc<Entry>> {
        self.read().by_id.get(token_id).cloned()
    }

    /// The token whose HMAC is `hmac`, compared in full and in constant time.
    pub(crate) fn by_hmac(&self, hmac: &[u8]) -> Option<Arc<Entry>> {
        if hmac.len() != HMAC_LEN {
            return None;
        }
        let tokens = self.read();
        let id = tokens.by_hmac.get(&hmac_key(hmac))?;
        let entry = tokens.by_id.get(id)?;
        crate::secret::constant_time_eq(&entry.hmac, hmac).then(|| Arc::clone(entry))
    }

    pub(crate) fn len(&self) -> usize {
        self.read().by_id.len()
    }

    /// Every token, in no particular order.
    pub(crate) fn all(&self) -> Vec<Arc<Entry>> {
        self.read().by_id.values().cloned().collect()
    }

    /// Applies records in log order; returns the events they stand for (at `now_ms`), unless
    /// `quiet` (a replay at start-up: the state the node starts with is no change).
    pub(crate) fn apply(&self, records: &[StoredRecord], now_ms: i64, quiet: bool) -> Vec<Event> {
        let touches = records.iter().any(|r| {
            matches!(
                r.record,
                MetadataRecord::DelegationToken(_) | MetadataRecord::RemoveDelegationToken { .. }
            )
        });
        if !touches {
            return Vec::new();
        }
        let mut events = Vec::with_capacity(if quiet { 0 } else { records.len() });
        let mut tokens = self.write();
        tokens.by_id.reserve(records.len());
        tokens.by_hmac.reserve(records.len());
        for stored in records {
            match &stored.record {
                MetadataRecord::DelegationToken(record) => {
                    let Some(info) = TokenInfo::from_record(record, stored.offset) else {
                        // Only this server writes these records; one it cannot read is skipped
                        // (and so unusable) rather than guessed at.
                        tracing::warn!(token_id = %record.token_id, "skipping a delegation token record with an invalid principal");
                        continue;
                    };
                    let event = upsert(&mut tokens, &self.hmac, info, now_ms, quiet);
                    events.extend(event);
                }
                MetadataRecord::RemoveDelegationToken { token_id } => {
                    if let Some(entry) = tokens.by_id.remove(token_id.as_str()) {
                        tokens.by_hmac.remove(&hmac_key(&entry.hmac));
                        if quiet {
                            continue;
                        }
                        events.push(Event::TokenExpired {
                            token_id: token_id.clone(),
                            owner: entry.info.owner.clone(),
                            removed: true,
                        });
                    }
                }
                _ => {}
            }
        }
        events
    }
}

/// Adds or replaces a token; the event says what happened to it (none when `quiet`).
fn upsert(
    tokens: &mut Tokens,
    hmac: &TokenHmac,
    info: TokenInfo,
    now_ms: i64,
    quiet: bool,
) -> Option<Event> {
    let id: Arc<str> = Arc::from(info.token_id.as_str());
    match tokens.by_id.get(&id).cloned() {
        Some(previous) => {
            let expired = info.is_expired(now_ms);
            let event = if quiet {
                None
            } else if expired {
                Some(Event::TokenExpired {
                    token_id: info.token_id.clone(),
                    owner: info.owner.clone(),
                    removed: false,
                })
            } else {
                Some(Event::TokenRenewed {
                    token_id: info.token_id.clone(),
                    expiry_ms: info.expiry_ms,
                })
            };
            // Same id, same HMAC, same credentials: keep what was derived.
            let entry = Entry {
                info,
                hmac: previous.hmac,
                scram: [
                    previous.scram[0]
                        .get()
                        .cloned()
                        .map_or_else(OnceLock::new, OnceLock::from),
                    previous.scram[1]
                        .get()
                        .cloned()
                        .map_or_else(OnceLock::new, OnceLock::from),
                ],
            };
            tokens.by_id.insert(id, Arc::new(entry));
            event
        }
        None => {
            let mac = hmac.of(&info.token_id);
            let event = (!quiet).then(|| Event::TokenCreated {
                token_id: info.token_id.clone(),
                owner: info.owner.clone(),
                requester: info.requester.clone(),
                expiry_ms: info.expiry_ms,
            });
            tokens.by_hmac.insert(hmac_key(&mac), Arc::clone(&id));
            tokens.by_id.insert(
                id,
                Arc::new(Entry {
                    info,
                    hmac: mac,
                    scram: [OnceLock::new(), OnceLock::new()],
                }),
            );
            event
        }
    }
}
