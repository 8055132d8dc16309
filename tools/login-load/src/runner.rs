//! Workers, the stop conditions and what they measured.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::args::Plan;
use crate::login::login;
use crate::mechanisms::ClientFactory;

/// What one worker (or the whole run, once merged) measured.
#[derive(Debug, Default)]
pub struct Tally {
    /// Latency of each successful measured login, in nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// Failure reason → count, for measured logins.
    pub failures: BTreeMap<String, u64>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.latencies_ns.extend(other.latencies_ns);
        for (reason, n) in other.failures {
            *self.failures.entry(reason).or_default() += n;
        }
    }
}

/// The run's result.
#[derive(Debug)]
pub struct Outcome {
    pub tally: Tally,
    /// From the end of the warm-up to the last worker's stop.
    pub measured: Duration,
    /// Logins done during the warm-up (not in the tally).
    pub warmup_logins: u64,
    /// Workers that had to be aborted at the hard deadline (should be zero).
    pub aborted_workers: usize,
}

pub fn build_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}

struct Shared {
    plan: Arc<Plan>,
    clients: ClientFactory,
    measure_from: Instant,
    stop_at: Instant,
    /// Measured logins started so far, for `--logins`.
    started: AtomicU64,
    warmup_logins: AtomicU64,
}

impl Shared {
    /// Claims the next login, or says the run is over. Warm-up logins claim nothing.
    fn claim(&self, now: Instant) -> Option<bool> {
        if now >= self.stop_at {
            return None;
        }
        if now < self.measure_from {
            return Some(false);
        }
        match self.plan.logins {
            Some(limit) if self.started.fetch_add(1, Ordering::Relaxed) >= limit => None,
            _ => Some(true),
        }
    }
}

async fn worker(shared: Arc<Shared>) -> Tally {
    let mut tally = Tally::default();
    loop {
        let start = Instant::now();
        let Some(measured) = shared.claim(start) else {
            return tally;
        };
        let result = tokio::time::timeout(
            shared.plan.timeout,
            login(&shared.plan.bootstrap, &shared.clients),
        )
        .await;
        let elapsed = start.elapsed();
        if !measured {
            shared.warmup_logins.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match result {
            Ok(Ok(())) => tally
                .latencies_ns
                .push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)),
            Ok(Err(failure)) => *tally.failures.entry(failure.to_string()).or_default() += 1,
            Err(_) => *tally.failures.entry("timeout".to_owned()).or_default() += 1,
        }
    }
}

pub async fn run(plan: Arc<Plan>) -> Outcome {
    let begin = Instant::now();
    let measure_from = begin + plan.warmup;
    let stop_at = measure_from + plan.duration;
    // Every login in flight at `stop_at` ends within its timeout; this is only a backstop.
    let hard_stop = stop_at + plan.timeout + Duration::from_secs(1);
    let shared = Arc::new(Shared {
        clients: ClientFactory::new(plan.mechanism, plan.user.clone(), plan.password.clone()),
        plan: Arc::clone(&plan),
        measure_from,
        stop_at,
        started: AtomicU64::new(0),
        warmup_logins: AtomicU64::new(0),
    });
    let handles: Vec<_> = (0..plan.connections)
        .map(|_| tokio::spawn(worker(Arc::clone(&shared))))
        .collect();

    let mut tally = Tally::default();
    let mut aborted_workers = 0;
    for handle in handles {
        let abort = handle.abort_handle();
        match tokio::time::timeout_at(hard_stop, handle).await {
            Ok(Ok(worker_tally)) => tally.merge(worker_tally),
            Ok(Err(_)) | Err(_) => {
                abort.abort();
                aborted_workers += 1;
            }
        }
    }
    let end = Instant::now();
    Outcome {
        tally,
        measured: end.saturating_duration_since(measure_from),
        warmup_logins: shared.warmup_logins.load(Ordering::Relaxed),
        aborted_workers,
    }
}
