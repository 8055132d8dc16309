//! [`TokenManager`]: Kafka's delegation-token rules (kafka-security-semantics §5.5–§5.9), sans-I/O.
//!
//! Every operation is a decision against the node's view of the log, taken at a time the caller
//! passes in: an answer, and the records to persist for it. The records carry a condition on the
//! token's version, so a decision taken on a view that moved on (a renew racing an expire) is not
//! written; the caller then asks again.

use std::sync::{Arc, Mutex, PoisonError};

use crate::credentials::{ScramCredential, ScramMechanism, TokenCredential, TokenView};
use crate::errors::ErrorCode;
use crate::events::Event;
use crate::principal::{Principal, USER_TYPE};
use crate::secret::Secret;
use crate::store::{
    AppendBatch, Condition, DelegationTokenRecord, MetadataRecord, RecordKey, StoredRecord,
};

use super::id::{has_token_id_shape, password, token_id_from, TokenHmac, HMAC_LEN};
use super::table::{TokenInfo, TokenTable};

/// Kafka's `delegation.token.max.lifetime.ms` default (7 days).
pub const DEFAULT_MAX_LIFETIME_MS: i64 = 604_800_000;
/// Kafka's `delegation.token.expiry.time.ms` default (1 day).
pub const DEFAULT_EXPIRY_TIME_MS: i64 = 86_400_000;
/// Kafka's `delegation.token.expiry.check.interval.ms` default (1 hour).
pub const DEFAULT_EXPIRY_CHECK_INTERVAL_MS: i64 = 3_600_000;
/// The iteration count of token SCRAM credentials (Kafka: the mechanism minimum).
pub const TOKEN_SCRAM_ITERATIONS: u32 = ScramMechanism::MIN_ITERATIONS;

/// The token settings (Kafka's `delegation.token.*`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TokenConfig {
    /// `delegation.token.secret.key`: the HMAC key; must be the same on every node.
    pub secret: Secret,
    /// `delegation.token.max.lifetime.ms`.
    pub max_lifetime_ms: i64,
    /// `delegation.token.expiry.time.ms`: the default (and largest) renewal period.
    pub expiry_time_ms: i64,
    /// `delegation.token.expiry.check.interval.ms`: how often expired tokens are swept.
    pub expiry_check_interval_ms: i64,
    /// Beyond Kafka: a SCRAM login whose user name is a live token id authenticates as that token
    /// even without the `tokenauth` extension (for clients that cannot send it).
    pub accept_token_without_extension: bool,
}

impl TokenConfig {
    /// Kafka's defaults with `secret`.
    pub fn new(secret: Secret) -> Self {
        Self {
            secret,
            max_lifetime_ms: DEFAULT_MAX_LIFETIME_MS,
            expiry_time_ms: DEFAULT_EXPIRY_TIME_MS,
            expiry_check_interval_ms: DEFAULT_EXPIRY_CHECK_INTERVAL_MS,
            accept_token_without_extension: false,
        }
    }

    /// Sets the lifetimes and the sweep interval (ms).
    pub fn with_times(mut self, max_lifetime_ms: i64, expiry_time_ms: i64, check_ms: i64) -> Self {
        self.max_lifetime_ms = max_lifetime_ms;
        self.expiry_time_ms = expiry_time_ms;
        self.expiry_check_interval_ms = check_ms;
        self
    }

    /// Sets [`TokenConfig::accept_token_without_extension`].
    pub fn with_accept_token_without_extension(mut self, accept: bool) -> Self {
        self.accept_token_without_extension = accept;
        self
    }
}

/// What the manager needs from outside the framework: randomness and SCRAM key derivation (the
/// SCRAM plugin's job). The host provides it.
pub trait TokenCrypto: Send + Sync {
    /// 16 random bytes for a token id.
    fn random_id_bytes(&self) -> [u8; 16];
    /// A SCRAM credential for `password` with a fresh random salt and `iterations`.
    fn scram_credential(
        &self,
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> ScramCredential;
}

/// A create request as the manager sees it (the gate and the owner check are the handler's).
#[derive(Clone, Debug)]
pub struct CreateRequest {
    /// Who asks.
    pub requester: Principal,
    /// For whom: the requester unless the request names another owner.
    pub owner: Principal,
    /// Who may renew it.
    pub renewers: Vec<Principal>,
    /// The requested maximum lifetime; ≤ 0 means the server's.
    pub max_lifetime_ms: i64,
}

/// A token that was decided on: what to answer and the record that makes it exist.
#[derive(Clone, Debug)]
pub struct NewToken {
    /// The token.
    pub info: TokenInfo,
    /// Its HMAC (the client's password); never stored.
    pub hmac: [u8; HMAC_LEN],
    /// The record to persist, conditional on no token with the same id existing.
    pub batch: AppendBatch,
}

/// A renew or expire that was decided on.
#[derive(Clone, Debug)]
pub struct ExpiryChange {
    /// The expiry to answer with.
    pub expiry_ms: i64,
    /// The token's id (public: it names the token; the HMAC is the secret).
    pub token_id: String,
    /// The token's owner.
    pub owner: Principal,
    /// The record to persist, conditional on the token not having changed since.
    pub batch: AppendBatch,
}

/// The delegation-token manager of one node (see the module documentation).
pub struct TokenManager {
    config: TokenConfig,
    table: TokenTable,
    crypto: Arc<dyn TokenCrypto>,
    next_sweep_ms: Mutex<i64>,
}

impl TokenManager {
    /// A manager with no tokens yet; the first sweep is due one interval after `now_ms`.
    pub fn new(config: TokenConfig, crypto: Arc<dyn TokenCrypto>, now_ms: i64) -> Self {
        let table = TokenTable::new(TokenHmac::new(&config.secret));
        let first = now_ms.saturating_add(config.expiry_check_interval_ms.max(1));
        Self {
            config,
            table,
            crypto,
            next_sweep_ms: Mutex::new(first),
        }
    }

    /// The settings.
    pub fn config(&self) -> &TokenConfig {
        &self.config
    }

    /// How many tokens the node knows.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the node knows no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies records of the metadata log (feed it from the store subscription); returns the
    /// events they stand for.
    pub fn apply(&self, records: &[StoredRecord], now_ms: i64) -> Vec<Event> {
        self.table.apply(records, now_ms, false)
    }

    /// Applies the records of a replay (start-up): the same state as [`apply`](Self::apply),
    /// without building events nobody is told.
    pub fn replay(&self, records: &[StoredRecord], now_ms: i64) {
        let _ = self.table.apply(records, now_ms, true);
    }

    /// The token with this id.
    pub fn get(&self, token_id: &str) -> Option<TokenInfo> {
        self.table.get(token_id).map(|e| e.info.clone())
    }

    /// The token's HMAC under this node's secret.
    pub fn hmac(&self, token_id: &str) -> [u8; HMAC_LEN] {
        self.table.hmac().of(token_id)
    }

    /// Every token with its HMAC (Describe returns the HMAC, as Kafka does).
    pub fn tokens(&self) -> Vec<(TokenInfo, [u8; HMAC_LEN])> {
        self.table
            .all()
            .into_iter()
            .map(|e| (e.info.clone(), e.hmac))
            .collect()
    }

    /// Kafka's controller steps of CreateDelegationToken after the broker's checks: renewers must
    /// be `User` principals (INVALID_PRINCIPAL_TYPE), then the lifetimes:
    /// `maxLife = min(serverMax, requested)` when requested > 0, `max = now + maxLife`,
    /// `expiry = min(max, now + expiry.time.ms)`, saturating.
    pub fn create(&self, request: &CreateRequest, now_ms: i64) -> Result<NewToken, ErrorCode> {
        if request.renewers.iter().any(|r| r.kind != USER_TYPE) {
            return Err(ErrorCode::INVALID_PRINCIPAL_TYPE);
        }
        let max_life = if request.max_lifetime_ms > 0 {
            self.config.max_lifetime_ms.min(request.max_lifetime_ms)
        } else {
            self.config.max_lifetime_ms
        };
        let max_ms = now_ms.saturating_add(max_life);
        let expiry_ms = max_ms.min(now_ms.saturating_add(self.config.expiry_time_ms));
        let token_id = self.fresh_id();
        let info = TokenInfo {
            token_id: token_id.clone(),
            owner: request.owner.clone(),
            requester: request.requester.clone(),
            renewers: request.renewers.clone(),
            issue_ms: now_ms,
            max_ms,
            expiry_ms,
            offset: 0,
        };
        let record = MetadataRecord::DelegationToken(DelegationTokenRecord {
            token_id: token_id.clone(),
            owner: info.owner.to_string(),
            requester: info.requester.to_string(),
            renewers: info.renewers.iter().map(ToString::to_string).collect(),
            issue_timestamp_ms: now_ms,
            max_timestamp_ms: max_ms,
            expiry_timestamp_ms: expiry_ms,
        });
        let batch = AppendBatch::new(vec![record]).with_conditions(vec![Condition::Latest {
            key: RecordKey::DelegationToken {
                token_id: token_id.clone(),
            },
            offset: None,
        }]);
        Ok(NewToken {
            hmac: self.table.hmac().of(&token_id),
            info,
            batch,
        })
    }

    /// Kafka's RenewDelegationToken: NOT_FOUND (no token has this HMAC), EXPIRED
    /// (`max < now || expiry < now`), OWNER_MISMATCH (neither owner nor renewer), then
    /// `expiry = min(max, now + min(expiry.time.ms, period))`, the default period when
    /// `period ≤ 0`. A renewal can shorten a token.
    pub fn renew(
        &self,
        principal: &Principal,
        hmac: &[u8],
        renew_period_ms: i64,
        now_ms: i64,
    ) -> Result<ExpiryChange, ErrorCode> {
        let token = self
            .table
            .by_hmac(hmac)
            .ok_or(ErrorCode::DELEGATION_TOKEN_NOT_FOUND)?;
        let info = &token.info;
        if info.is_expired(now_ms) {
            return Err(ErrorCode::DELEGATION_TOKEN_EXPIRED);
        }
        if !info.may_renew(principal) {
            return Err(ErrorCode::DELEGATION_TOKEN_OWNER_MISMATCH);
        }
        let period = if renew_period_ms > 0 {
            self.config.expiry_time_ms.min(renew_period_ms)
        } else {
            self.config.expiry_time_ms
        };
        let expiry_ms = info.max_ms.min(now_ms.saturating_add(period));
        Ok(ExpiryChange {
            expiry_ms,
            token_id: info.token_id.clone(),
            owner: info.owner.clone(),
            batch: versioned(info, info.record_with_expiry(expiry_ms)),
        })
    }

    /// Kafka's ExpireDelegationToken: NOT_FOUND, OWNER_MISMATCH; a negative period removes the
    /// token at once and answers `now` (no EXPIRED check); otherwise EXPIRED, then
    /// `expiry = min(max, now + period)` — which can *extend* the token up to its max.
    pub fn expire(
        &self,
        principal: &Principal,
        hmac: &[u8],
        expiry_period_ms: i64,
        now_ms: i64,
    ) -> Result<ExpiryChange, ErrorCode> {
        let token = self
            .table
            .by_hmac(hmac)
            .ok_or(ErrorCode::DELEGATION_TOKEN_NOT_FOUND)?;
        let info = &token.info;
        if !info.may_renew(principal) {
            return Err(ErrorCode::DELEGATION_TOKEN_OWNER_MISMATCH);
        }
        if expiry_period_ms < 0 {
            let removal = MetadataRecord::RemoveDelegationToken {
                token_id: info.token_id.clone(),
            };
            return Ok(ExpiryChange {
                expiry_ms: now_ms,
                token_id: info.token_id.clone(),
                owner: info.owner.clone(),
                batch: versioned(info, removal),
            });
        }
        if info.is_expired(now_ms) {
            return Err(ErrorCode::DELEGATION_TOKEN_EXPIRED);
        }
        let expiry_ms = info.max_ms.min(now_ms.saturating_add(expiry_period_ms));
        Ok(ExpiryChange {
            expiry_ms,
            token_id: info.token_id.clone(),
            owner: info.owner.clone(),
            batch: versioned(info, info.record_with_expiry(expiry_ms)),
        })
    }

    /// When the next sweep of expired tokens is due (ms since the epoch).
    pub fn poll_timeout(&self) -> i64 {
        *self.sweep_guard()
    }

    /// Runs the sweep if it is due: one removal per expired token (`max < now || expiry < now`),
    /// each conditional on the token not having changed, and schedules the next sweep.
    pub fn on_timeout(&self, now_ms: i64) -> Vec<AppendBatch> {
        {
            let mut next = self.sweep_guard();
            if now_ms < *next {
                return Vec::new();
            }
            *next = now_ms.saturating_add(self.config.expiry_check_interval_ms.max(1));
        }
        self.expired(now_ms)
    }

    /// Removals for every token expired at `now_ms` (what a sweep writes).
    pub fn expired(&self, now_ms: i64) -> Vec<AppendBatch> {
        self.table
            .all()
            .into_iter()
            .filter(|e| e.info.is_expired(now_ms))
            .map(|e| {
                tracing::info!(token_id = %e.info.token_id, owner = %e.info.owner, "delegation token expired");
                versioned(
                    &e.info,
                    MetadataRecord::RemoveDelegationToken {
                        token_id: e.info.token_id.clone(),
                    },
                )
            })
            .collect()
    }

    fn sweep_guard(&self) -> std::sync::MutexGuard<'_, i64> {
        self.next_sweep_ms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A token id no token has (Kafka draws `Uuid.randomUuid()` again for reserved ids and ids
    /// starting with `-`; a collision with a live id is also drawn again, and the write's
    /// condition catches one with a token being created at the same moment).
    fn fresh_id(&self) -> String {
        loop {
            if let Some(id) = token_id_from(self.crypto.random_id_bytes()) {
                if self.table.get(&id).is_none() {
                    return id;
                }
            }
        }
    }
}

/// `record`, to be written only if the token is still at the version `info` was read at.
fn versioned(info: &TokenInfo, record: MetadataRecord) -> AppendBatch {
    AppendBatch::new(vec![record]).with_conditions(vec![Condition::Latest {
        key: RecordKey::DelegationToken {
            token_id: info.token_id.clone(),
        },
        offset: Some(info.offset),
    }])
}

impl TokenView for TokenManager {
    fn token(&self, token_id: &str, mechanism: ScramMechanism) -> Option<TokenCredential> {
        let entry = self.table.get(token_id)?;
        let credential = entry.scram(mechanism, || {
            self.crypto
                .scram_credential(mechanism, &password(&entry.hmac), TOKEN_SCRAM_ITERATIONS)
        });
        Some(TokenCredential::new(
            entry.info.owner.name.clone(),
            credential,
            entry.info.expiry_ms,
        ))
    }

    fn accepts_token_without_extension(&self, name: &str) -> bool {
        self.config.accept_token_without_extension && has_token_id_shape(name)
    }
}

impl std::fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenManager")
            .field("tokens", &self.table.len())
            .field("max_lifetime_ms", &self.config.max_lifetime_ms)
            .field("expiry_time_ms", &self.config.expiry_time_ms)
            .finish_non_exhaustive()
    }
}
