//! The JWKS validator's key set, fetched by the host and handed to the (sans-I/O) validator
//! through its [`SharedKeySet`].
//!
//! - **At start** ([`JwksRefresher::start`]) the set is fetched, retried with [`Backoff`]; the
//!   node does not start without it (a validator without keys would refuse every login).
//! - **Every `jwks_refresh_ms`** a task on the OAuth runtime fetches it again (with the same
//!   retries). A set that cannot be had, cannot be parsed or has no usable key is not stored:
//!   the old set stays, and a warning names the URL and why.
//! - **An unknown `kid`**: the validator (which rate-limits per kid) calls
//!   [`KeyRefresh::request_refresh`], which only wakes the task (a [`Notify`]: never blocks, and
//!   requests made while a fetch is in flight fold into one more fetch after it). The task runs
//!   at most one fetch at a time, and kid-triggered fetches at most once per
//!   `jwks_kid_refresh_min_interval_ms`, so a flood of tokens with random kids costs the
//!   provider one fetch per interval. The token that missed is refused; the next login with
//!   that kid finds the key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::metrics::Counter;
use opentelemetry::KeyValue;
use portcullis_plugin_oauthbearer::jwks::{KeyRefresh, KeySet, SharedKeySet};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use url::Url;

use super::http::{HttpClient, HttpError};
use super::retry::{Backoff, Exhausted};

/// When the key set is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshSettings {
    /// `jwks_refresh_ms`.
    pub interval: Duration,
    /// `jwks_retry_backoff_ms` / `jwks_retry_backoff_max_ms`.
    pub backoff: Backoff,
    /// `jwks_kid_refresh_min_interval_ms`.
    pub kid_min_interval: Duration,
}

/// Why a key set could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The fetch failed.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The answer is not a key set.
    #[error("not a JSON Web Key Set: {0}")]
    Parse(String),
    /// The set holds no key Portcullis can verify with.
    #[error("the key set holds no usable key (RSA of 2048 to 4096 bits, EC P-256/P-384, Ed25519){}", skipped_note(.0))]
    NoKeys(Vec<String>),
}

fn skipped_note(skipped: &[String]) -> String {
    if skipped.is_empty() {
        String::new()
    } else {
        format!("; skipped: {}", skipped.join("; "))
    }
}

/// What caused a fetch (a metric attribute and a log field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The first fetch, at start.
    Start,
    /// `jwks_refresh_ms` passed.
    Periodic,
    /// A token named a kid the set does not hold.
    UnknownKid,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Periodic => "periodic",
            Self::UnknownKid => "unknown_kid",
        }
    }
}

/// Counts, for tests and `check-config`-style reports (also exported as the metric
/// `portcullis.oauthbearer.jwks.fetches`, by trigger and outcome).
#[derive(Debug, Default)]
pub struct RefreshStats {
    /// HTTP (or file) fetches attempted, retries included.
    pub attempts: AtomicU64,
    /// Refreshes that stored a new set (the start included).
    pub refreshed: AtomicU64,
    /// Refreshes that kept the old set (after their retries).
    pub failed: AtomicU64,
    /// Refreshes asked for by unknown kids (before any rate limit of the task).
    pub kid_requests: AtomicU64,
}

/// Fetches the key set from `jwks_url`.
#[derive(Debug, Clone)]
pub struct JwksSource {
    url: Url,
    http: HttpClient,
}

impl JwksSource {
    /// Fetches from `url` (already checked against `allowed_urls`) with `http`.
    pub fn new(url: Url, http: HttpClient) -> Self {
        Self { url, http }
    }

    /// The URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// One fetch: GET (or read), parse, and at least one usable key.
    ///
    /// # Errors
    /// [`FetchError`].
    pub async fn fetch(&self) -> Result<KeySet, FetchError> {
        let body = self.http.get(&self.url).await?;
        let set = KeySet::from_json(&body).map_err(|e| FetchError::Parse(e.to_string()))?;
        if set.is_empty() {
            return Err(FetchError::NoKeys(set.skipped().to_vec()));
        }
        Ok(set)
    }
}

struct Shared {
    source: JwksSource,
    keys: Arc<SharedKeySet>,
    settings: RefreshSettings,
    wake: Notify,
    stats: RefreshStats,
}

/// The refresher: the validator's [`KeyRefresh`], and the task that keeps the set fresh.
#[derive(Clone)]
pub struct JwksRefresher {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for JwksRefresher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksRefresher")
            .field("url", &self.shared.source.url.as_str())
            .field("settings", &self.shared.settings)
            .field("stats", &self.shared.stats)
            .finish_non_exhaustive()
    }
}

impl JwksRefresher {
    /// Fetches the first key set (with retries).
    ///
    /// # Errors
    /// The last attempt's error once the retries are used up.
    pub async fn start(
        source: JwksSource,
        settings: RefreshSettings,
    ) -> Result<Self, Exhausted<FetchError>> {
        let stats = RefreshStats::default();
        let first = fetch_with_retry(&source, &settings, &stats, Trigger::Start).await?;
        tracing::info!(
            url = %source.url,
            keys = first.len(),
            kids = ?first.kids(),
            "OAUTHBEARER key set fetched"
        );
        if !first.skipped().is_empty() {
            tracing::warn!(
                url = %source.url,
                skipped = ?first.skipped(),
                "OAUTHBEARER key set: keys that cannot verify tokens were skipped"
            );
        }
        Ok(Self {
            shared: Arc::new(Shared {
                source,
                keys: Arc::new(SharedKeySet::new(first)),
                settings,
                wake: Notify::new(),
                stats,
            }),
        })
    }

    /// The key set the validator reads.
    pub fn keys(&self) -> Arc<SharedKeySet> {
        Arc::clone(&self.shared.keys)
    }

    /// The counts.
    pub fn stats(&self) -> &RefreshStats {
        &self.shared.stats
    }

    /// The URL the set comes from.
    pub fn url(&self) -> &Url {
        &self.shared.source.url
    }

    /// The task that refreshes the set until `stop` turns true (or its sender is dropped).
    /// Spawn it on the runtime that runs the HTTP client.
    pub fn run(&self, mut stop: watch::Receiver<bool>) -> impl std::future::Future<Output = ()> {
        let shared = Arc::clone(&self.shared);
        async move {
            let settings = shared.settings;
            let mut next_periodic = Instant::now() + settings.interval;
            let mut last_kid_refresh: Option<Instant> = None;
            loop {
                if *stop.borrow() {
                    return;
                }
                let trigger = tokio::select! {
                    biased;
                    changed = stop.changed() => {
                        if changed.is_err() || *stop.borrow() { return; }
                        continue;
                    }
                    () = tokio::time::sleep_until(next_periodic) => Trigger::Periodic,
                    () = shared.wake.notified() => Trigger::UnknownKid,
                };
                if trigger == Trigger::UnknownKid {
                    if let Some(earliest) = last_kid_refresh.map(|t| t + settings.kid_min_interval)
                    {
                        if Instant::now() < earliest {
                            tracing::debug!(
                                url = %shared.source.url,
                                "unknown kid: the key set was refreshed for one less than \
                                 jwks_kid_refresh_min_interval_ms ago; refreshing when it is over"
                            );
                            tokio::select! {
                                biased;
                                _ = stop.changed() => return,
                                () = tokio::time::sleep_until(earliest) => {}
                            }
                        }
                    }
                    last_kid_refresh = Some(Instant::now());
                    // The fetch about to start answers every request made until now: a wake-up
                    // stored meanwhile (a flood during the wait) is used up here.
                    tokio::select! {
                        biased;
                        () = shared.wake.notified() => {}
                        () = std::future::ready(()) => {}
                    }
                }
                let refreshed = tokio::select! {
                    biased;
                    _ = stop.changed() => return,
                    refreshed = shared.refresh(trigger) => refreshed,
                };
                if refreshed || trigger == Trigger::Periodic {
                    next_periodic = Instant::now() + settings.interval;
                }
            }
        }
    }
}

impl Shared {
    /// One refresh (with retries); the old set stays when it fails. Whether a set was stored.
    async fn refresh(&self, trigger: Trigger) -> bool {
        match fetch_with_retry(&self.source, &self.settings, &self.stats, trigger).await {
            Ok(set) => {
                let old = self.keys.load();
                let (old_kids, new_kids) = (old.kids(), set.kids());
                if old_kids == new_kids {
                    tracing::debug!(url = %self.source.url, trigger = trigger.as_str(), keys = set.len(), "OAUTHBEARER key set refreshed, unchanged");
                } else {
                    tracing::info!(url = %self.source.url, trigger = trigger.as_str(), keys = set.len(), kids = ?new_kids, previous = ?old_kids, "OAUTHBEARER key set refreshed");
                }
                self.keys.store(set);
                true
            }
            Err(exhausted) => {
                tracing::warn!(
                    url = %self.source.url,
                    trigger = trigger.as_str(),
                    attempts = exhausted.attempts,
                    error = %exhausted.error,
                    kept_keys = self.keys.load().len(),
                    "cannot refresh the OAUTHBEARER key set; keeping the keys already held"
                );
                false
            }
        }
    }
}

impl KeyRefresh for JwksRefresher {
    fn request_refresh(&self, kid: &str) {
        self.shared
            .stats
            .kid_requests
            .fetch_add(1, Ordering::Relaxed);
        // The kid comes from a client: shown short, at debug only.
        let shown: String = kid.chars().take(64).collect();
        tracing::debug!(kid = %shown.escape_debug(), "a token names a kid the key set does not hold; refreshing it");
        self.shared.wake.notify_one();
    }
}

async fn fetch_with_retry(
    source: &JwksSource,
    settings: &RefreshSettings,
    stats: &RefreshStats,
    trigger: Trigger,
) -> Result<KeySet, Exhausted<FetchError>> {
    let result = settings
        .backoff
        .retry(|| {
            stats.attempts.fetch_add(1, Ordering::Relaxed);
            source.fetch()
        })
        .await;
    let outcome = if result.is_ok() {
        stats.refreshed.fetch_add(1, Ordering::Relaxed);
        "ok"
    } else {
        stats.failed.fetch_add(1, Ordering::Relaxed);
        "failed"
    };
    fetch_counter().add(
        1,
        &[
            KeyValue::new("trigger", trigger.as_str()),
            KeyValue::new("outcome", outcome),
        ],
    );
    result
}

/// `portcullis.oauthbearer.jwks.fetches` (made on first use, from the global meter provider
/// that telemetry installs before the node is built).
fn fetch_counter() -> &'static Counter<u64> {
    static COUNTER: OnceLock<Counter<u64>> = OnceLock::new();
    COUNTER.get_or_init(|| {
        opentelemetry::global::meter(crate::telemetry::SCOPE)
            .u64_counter("portcullis.oauthbearer.jwks.fetches")
            .with_unit("{refresh}")
            .with_description(
                "OAUTHBEARER key set refreshes (retries included in one), by trigger (start, periodic, unknown_kid) and outcome (ok, failed)",
            )
            .build()
    })
}
