//! Retrying a fetch with exponential backoff, as Kafka's OAuth `Retry` helper does: attempt `n`
//! (from 1) failing waits `backoff × 2^(n−1)` before attempt `n + 1`, and `backoff_max` is the
//! **total** time allowed (measured from the first attempt, the attempts' own time included),
//! not a cap on each wait: the last wait is cut to end at it, one last attempt is made then, and
//! none after. With the defaults (100 ms, 10 s) a provider that stays down is tried 8 times
//! (at 0, 0.1, 0.3, 0.7, 1.5, 3.1, 6.3 and 10 s) when each attempt fails at once; an attempt that
//! takes its whole HTTP timeout uses up the time as well.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The retry schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait.
    pub initial: Duration,
    /// The total time allowed.
    pub max_total: Duration,
}

/// What the last attempt said, and how many there were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted<E> {
    /// The last attempt's error.
    pub error: E,
    /// Attempts made.
    pub attempts: u32,
}

impl Backoff {
    /// The wait after failed attempt `n` (1-based), uncapped.
    pub fn wait_after(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor)
    }

    /// Runs `attempt` until it succeeds or the time is up.
    ///
    /// # Errors
    /// The last error and the number of attempts.
    pub async fn retry<T, E, F, Fut>(&self, mut attempt: F) -> Result<T, Exhausted<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let deadline = Instant::now() + self.max_total;
        let mut attempts = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(Exhausted { error, attempts });
            }
            let wake = (now + self.wait_after(attempts)).min(deadline);
            tokio::time::sleep_until(wake).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn waits_double() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max_total: Duration::from_secs(10),
        };
        let waits: Vec<u128> = (1..=5).map(|n| b.wait_after(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600]);
        assert_eq!(
            b.wait_after(40),
            Duration::from_millis(100).saturating_mul(u32::MAX)
        );
    }

    #[tokio::test]
    async fn the_maximum_is_a_total_deadline() {
        let b = Backoff {
            initial: Duration::from_millis(10),
            max_total: Duration::from_millis(200),
        };
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        let result: Result<(), _> = b
            .retry(|| {
                calls.fetch_add(1, Ordering::Relaxed);
                async { Err::<(), _>("down") }
            })
            .await;
        let exhausted = result.unwrap_err();
        // At 0, 10, 30, 70, 150 ms, then the wait cut to end at 200 ms and one last try (fewer
        // when a loaded machine oversleeps; never more).
        assert!((2..=6).contains(&exhausted.attempts), "{exhausted:?}");
        assert_eq!(exhausted.error, "down");
        assert_eq!(calls.load(Ordering::Relaxed), exhausted.attempts);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_millis(2000), "{took:?}");
    }

    #[tokio::test]
    async fn success_stops_retrying() {
        let b = Backoff {
            initial: Duration::from_millis(1),
            max_total: Duration::from_secs(10),
        };
        let calls = AtomicU32::new(0);
        let result = b
            .retry(|| {
                let n = calls.fetch_add(1, Ordering::Relaxed);
                async move {
                    if n < 2 {
                        Err("down")
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(result, Ok(2));
    }
}
