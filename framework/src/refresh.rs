//! The client-side credential refresh algorithm of KIP-368 / KIP-255 (Kafka's
//! `ExpiringCredentialRefreshingLogin`), as a pure function of the time, the credential and one
//! random draw, so every branch is testable (kafka-security-semantics §2.6).

use std::sync::Arc;

use crate::events::{Event, EventBus};
use crate::login::{ExpiringCredential, LoginModule};

/// `sasl.login.refresh.*` settings.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RefreshConfig {
    /// `sasl.login.refresh.window.factor` (0.5–1.0).
    pub window_factor: f64,
    /// `sasl.login.refresh.window.jitter` (0–0.25).
    pub window_jitter: f64,
    /// `sasl.login.refresh.min.period.seconds` (0–900).
    pub min_period_seconds: i64,
    /// `sasl.login.refresh.buffer.seconds` (0–3600).
    pub buffer_seconds: i64,
}

impl Default for RefreshConfig {
    fn default() -> Self {
        Self {
            window_factor: 0.8,
            window_jitter: 0.05,
            min_period_seconds: 60,
            buffer_seconds: 300,
        }
    }
}

/// Why a refresh setting is out of Kafka's legal range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRefreshConfig(pub String);

impl RefreshConfig {
    /// Checks Kafka's legal ranges.
    pub fn validate(&self) -> Result<(), InvalidRefreshConfig> {
        let check = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(InvalidRefreshConfig(what.to_owned()))
            }
        };
        check(
            (0.5..=1.0).contains(&self.window_factor),
            "window factor must be in 0.5..=1.0",
        )?;
        check(
            (0.0..=0.25).contains(&self.window_jitter),
            "window jitter must be in 0..=0.25",
        )?;
        check(
            (0..=900).contains(&self.min_period_seconds),
            "min period must be in 0..=900 seconds",
        )?;
        check(
            (0..=3600).contains(&self.buffer_seconds),
            "buffer must be in 0..=3600 seconds",
        )
    }
}

/// The fixed retry delay after a failed or missing login.
pub const RETRY_MS: i64 = 10_000;

/// What the refresher should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextRefresh {
    /// Refresh (log in again) at this time, ms since the epoch.
    At(i64),
    /// Stop refreshing: the credential cannot be refreshed past its absolute last refresh time.
    Stop,
}

/// The next refresh time for `credential` at `now_ms`; `random` is a draw from `[0, 1)`.
pub fn next_refresh(
    config: &RefreshConfig,
    credential: Option<&ExpiringCredential>,
    now_ms: i64,
    random: f64,
) -> NextRefresh {
    let Some(credential) = credential else {
        return NextRefresh::At(now_ms + RETRY_MS);
    };
    let Some(expiry) = credential.expiry_ms else {
        // A credential that never expires needs no refresh; check again after the retry delay in
        // case it is replaced by an expiring one.
        return NextRefresh::At(now_ms + RETRY_MS);
    };
    if now_ms > expiry {
        // Re-login before logout is allowed (as for OAUTHBEARER): try again shortly.
        return NextRefresh::At(now_ms + RETRY_MS);
    }
    if credential
        .absolute_last_refresh_ms
        .is_some_and(|last| last < expiry)
    {
        return NextRefresh::Stop;
    }
    let pct = config.window_factor + config.window_jitter * random.clamp(0.0, 1.0);
    let min_period_ms = config.min_period_seconds * 1000;
    let buffer_ms = config.buffer_seconds * 1000;
    let proposed = if now_ms + min_period_ms + buffer_ms > expiry {
        // Too close to expiry to honour both buffers: ignore them.
        now_ms + scale(expiry - now_ms, pct)
    } else {
        let start = credential.start_ms.unwrap_or(now_ms);
        let proposed = start + scale(expiry - start, pct);
        if proposed > expiry - buffer_ms {
            expiry - buffer_ms
        } else if proposed < now_ms + min_period_ms {
            now_ms + min_period_ms
        } else {
            proposed
        }
    };
    // KAFKA-7945: never schedule in the past.
    if proposed < now_ms {
        NextRefresh::At(now_ms + RETRY_MS)
    } else {
        NextRefresh::At(proposed)
    }
}

/// Drives login modules whose credentials expire: when each must be refreshed, and the refresh
/// itself. Sans-I/O: the host sleeps until [`RefreshScheduler::poll_timeout`] and then calls
/// [`RefreshScheduler::on_timeout`]. Modules with a non-expiring credential are never scheduled.
pub struct RefreshScheduler {
    config: RefreshConfig,
    events: EventBus,
    entries: Vec<Entry>,
}

struct Entry {
    module: Arc<dyn LoginModule>,
    credential: Option<ExpiringCredential>,
    next: NextRefresh,
}

impl RefreshScheduler {
    /// An empty scheduler.
    pub fn new(config: RefreshConfig, events: EventBus) -> Self {
        Self {
            config,
            events,
            entries: Vec::new(),
        }
    }

    /// Adds a module, scheduling its first refresh from its current credential.
    pub fn add(&mut self, module: Arc<dyn LoginModule>, now_ms: i64, random: f64) {
        let credential = module.credential();
        let next = self.schedule(Some(&credential), now_ms, random);
        self.entries.push(Entry {
            module,
            credential: Some(credential),
            next,
        });
    }

    fn schedule(
        &self,
        credential: Option<&ExpiringCredential>,
        now_ms: i64,
        random: f64,
    ) -> NextRefresh {
        match credential {
            Some(c) if c.expiry_ms.is_none() => NextRefresh::Stop,
            other => next_refresh(&self.config, other, now_ms, random),
        }
    }

    /// The earliest time a refresh is due, if any is scheduled.
    pub fn poll_timeout(&self) -> Option<i64> {
        self.entries
            .iter()
            .filter_map(|e| match e.next {
                NextRefresh::At(t) => Some(t),
                NextRefresh::Stop => None,
            })
            .min()
    }

    /// Refreshes every module that is due at `now_ms`; returns how many were refreshed.
    pub fn on_timeout(&mut self, now_ms: i64, mut random: impl FnMut() -> f64) -> usize {
        let mut refreshed = 0;
        for i in 0..self.entries.len() {
            let Some(entry) = self.entries.get(i) else {
                continue;
            };
            if !matches!(entry.next, NextRefresh::At(t) if t <= now_ms) {
                continue;
            }
            let outcome = entry.module.refresh();
            let (credential, next) = match outcome {
                Ok(credential) => {
                    refreshed += 1;
                    self.events.publish(Event::CredentialRefreshed {
                        principal_name: credential.principal_name.clone(),
                        expiry_ms: credential.expiry_ms,
                    });
                    let next = self.schedule(Some(&credential), now_ms, random());
                    (Some(credential), next)
                }
                Err(e) => {
                    // Kafka retries a failed re-login after a fixed 10 s, indefinitely.
                    tracing::warn!(error = %e, "refreshing the upstream credential failed; retrying in 10 s");
                    (None, NextRefresh::At(now_ms + RETRY_MS))
                }
            };
            if let Some(entry) = self.entries.get_mut(i) {
                if credential.is_some() {
                    entry.credential = credential;
                }
                entry.next = next;
            }
        }
        refreshed
    }
}

impl std::fmt::Debug for RefreshScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshScheduler")
            .field("modules", &self.entries.len())
            .field("next", &self.poll_timeout())
            .finish()
    }
}

fn scale(span_ms: i64, pct: f64) -> i64 {
    (span_ms as f64 * pct) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn cred(start: Option<i64>, expiry: i64) -> ExpiringCredential {
        let mut credential = ExpiringCredential::expiring("svc", 0, expiry);
        credential.start_ms = start;
        credential
    }

    #[test]
    fn every_branch() {
        let c = RefreshConfig::default();
        let now = 1_000_000;
        struct Case {
            name: &'static str,
            credential: Option<ExpiringCredential>,
            random: f64,
            want: NextRefresh,
        }
        let cases = [
            Case {
                name: "no credential",
                credential: None,
                random: 0.0,
                want: NextRefresh::At(now + RETRY_MS),
            },
            Case {
                name: "already expired",
                credential: Some(cred(Some(0), now - 1)),
                random: 0.0,
                want: NextRefresh::At(now + RETRY_MS),
            },
            Case {
                name: "absolute last refresh before expiry",
                credential: Some(
                    cred(Some(now), now + 100 * MIN).with_absolute_last_refresh_ms(Some(now + 10)),
                ),
                random: 0.0,
                want: NextRefresh::Stop,
            },
            Case {
                name: "inside min period + buffer: buffers ignored",
                credential: Some(cred(Some(now), now + 100_000)),
                random: 0.0,
                want: NextRefresh::At(now + 80_000),
            },
            Case {
                name: "jitter raises the factor",
                credential: Some(cred(Some(now), now + 100_000)),
                random: 1.0,
                want: NextRefresh::At(now + 85_000),
            },
            Case {
                name: "proposed past expiry - buffer: clamped to expiry - buffer",
                credential: Some(cred(Some(now), now + 7 * MIN)),
                random: 0.0,
                want: NextRefresh::At(now + 7 * MIN - 300_000),
            },
            Case {
                name: "proposed before now + min period: pushed to now + min period",
                credential: Some(cred(Some(now - 1_000 * MIN), now + 60 * MIN)),
                random: 0.0,
                want: NextRefresh::At(now + MIN),
            },
            Case {
                name: "proposed in the window: taken",
                credential: Some(cred(Some(now), now + 100 * MIN)),
                random: 0.0,
                want: NextRefresh::At(now + 80 * MIN),
            },
            Case {
                name: "missing start counts from now",
                credential: Some(cred(None, now + 100 * MIN)),
                random: 0.0,
                want: NextRefresh::At(now + 80 * MIN),
            },
        ];
        for case in cases {
            assert_eq!(
                next_refresh(&c, case.credential.as_ref(), now, case.random),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn min_period_branch_when_buffer_does_not_bite() {
        // start long ago so that proposed < now + min period, while expiry is far enough that the
        // buffer clamp does not apply.
        let c = RefreshConfig {
            buffer_seconds: 0,
            ..RefreshConfig::default()
        };
        let now = 10 * MIN;
        let credential = cred(Some(0), now + 2 * MIN);
        // proposed = 0 + 12 min * 0.8 = 9.6 min < now + 1 min → now + 1 min
        assert_eq!(
            next_refresh(&c, Some(&credential), now, 0.0),
            NextRefresh::At(now + MIN)
        );
    }

    #[test]
    fn never_in_the_past() {
        let c = RefreshConfig {
            buffer_seconds: 3600,
            min_period_seconds: 0,
            ..RefreshConfig::default()
        };
        let now = 10_000_000;
        // proposed > expiry - buffer and expiry - buffer < now → safety guard
        let credential = cred(Some(now), now + 3_700_000);
        let got = next_refresh(&c, Some(&credential), now, 0.0);
        assert_eq!(got, NextRefresh::At(now + 100_000));
        let credential = cred(Some(now), now + 3_600_001);
        assert!(
            matches!(next_refresh(&c, Some(&credential), now, 0.0), NextRefresh::At(t) if t >= now)
        );
    }

    struct Expiring {
        expiry: std::sync::atomic::AtomicI64,
        fail: std::sync::atomic::AtomicBool,
    }
    impl LoginModule for Expiring {
        fn mechanism(&self) -> &str {
            "OAUTHBEARER"
        }
        fn credential(&self) -> ExpiringCredential {
            ExpiringCredential::expiring(
                "svc",
                0,
                self.expiry.load(std::sync::atomic::Ordering::SeqCst),
            )
        }
        fn start(&self) -> Result<crate::login::ClientExchange, crate::login::LoginError> {
            Err(crate::login::LoginError("not used by the scheduler".into()))
        }
        fn refresh(&self) -> Result<ExpiringCredential, crate::login::LoginError> {
            if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(crate::login::LoginError("token endpoint down".into()));
            }
            self.expiry
                .fetch_add(100 * MIN, std::sync::atomic::Ordering::SeqCst);
            Ok(self.credential())
        }
    }

    #[test]
    fn scheduler_refreshes_when_due_and_retries_failures() {
        let events = EventBus::new();
        let sub = events.subscribe(8);
        let module = Arc::new(Expiring {
            expiry: (100 * MIN).into(),
            fail: false.into(),
        });
        let mut s = RefreshScheduler::new(RefreshConfig::default(), events);
        s.add(module.clone(), 0, 0.0);
        assert_eq!(s.poll_timeout(), Some(80 * MIN));
        assert_eq!(s.on_timeout(80 * MIN - 1, || 0.0), 0);
        assert_eq!(s.on_timeout(80 * MIN, || 0.0), 1);
        assert!(matches!(
            sub.try_recv(),
            Some(Event::CredentialRefreshed { .. })
        ));
        // New expiry 200 min, start 0: proposed 160 min.
        assert_eq!(s.poll_timeout(), Some(160 * MIN));
        module.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(s.on_timeout(160 * MIN, || 0.0), 0);
        assert_eq!(s.poll_timeout(), Some(160 * MIN + RETRY_MS));
    }

    #[test]
    fn non_expiring_credentials_are_not_scheduled() {
        struct Static;
        impl LoginModule for Static {
            fn mechanism(&self) -> &str {
                "PLAIN"
            }
            fn credential(&self) -> ExpiringCredential {
                ExpiringCredential::non_expiring("svc")
            }
            fn start(&self) -> Result<crate::login::ClientExchange, crate::login::LoginError> {
                Err(crate::login::LoginError("not used by the scheduler".into()))
            }
        }
        let mut s = RefreshScheduler::new(RefreshConfig::default(), EventBus::new());
        s.add(Arc::new(Static), 0, 0.5);
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn validates_ranges() {
        assert!(RefreshConfig::default().validate().is_ok());
        assert!(RefreshConfig {
            window_factor: 0.4,
            ..RefreshConfig::default()
        }
        .validate()
        .is_err());
        assert!(RefreshConfig {
            window_jitter: 0.3,
            ..RefreshConfig::default()
        }
        .validate()
        .is_err());
        assert!(RefreshConfig {
            min_period_seconds: 901,
            ..RefreshConfig::default()
        }
        .validate()
        .is_err());
        assert!(RefreshConfig {
            buffer_seconds: 3601,
            ..RefreshConfig::default()
        }
        .validate()
        .is_err());
    }
}
