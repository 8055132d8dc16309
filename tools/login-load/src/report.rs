//! The summary: rates, latency percentiles, failures; as text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::args::Plan;
use crate::runner::Outcome;

/// Latency percentiles of successful logins, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub bootstrap: String,
    pub mechanism: &'static str,
    pub connections: usize,
    pub threads: usize,
    pub warmup_s: f64,
    pub warmup_logins: u64,
    pub measured_s: f64,
    /// Successful measured logins.
    pub logins: u64,
    pub logins_per_s: f64,
    pub latency: Option<Latency>,
    pub failures_total: u64,
    pub failures: BTreeMap<String, u64>,
    /// CPU seconds the tool itself used over the whole run (warm-up included), if known.
    pub client_cpu_s: Option<f64>,
    pub aborted_workers: usize,
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted.get(index).copied().unwrap_or(0)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl Summary {
    pub fn new(plan: &Plan, outcome: Outcome, client_cpu_s: Option<f64>) -> Self {
        let mut latencies = outcome.tally.latencies_ns;
        latencies.sort_unstable();
        let logins = latencies.len() as u64;
        let measured_s = outcome.measured.as_secs_f64();
        let latency = (!latencies.is_empty()).then(|| Latency {
            p50_ms: ms(percentile(&latencies, 50.0)),
            p90_ms: ms(percentile(&latencies, 90.0)),
            p99_ms: ms(percentile(&latencies, 99.0)),
            max_ms: ms(latencies.last().copied().unwrap_or(0)),
            mean_ms: ms(latencies.iter().sum::<u64>() / logins.max(1)),
        });
        Summary {
            bootstrap: plan.bootstrap.clone(),
            mechanism: plan.mechanism.name(),
            connections: plan.connections,
            threads: plan.threads,
            warmup_s: plan.warmup.as_secs_f64(),
            warmup_logins: outcome.warmup_logins,
            measured_s,
            logins,
            logins_per_s: if measured_s > 0.0 {
                logins as f64 / measured_s
            } else {
                0.0
            },
            latency,
            failures_total: outcome.tally.failures.values().sum(),
            failures: outcome.tally.failures,
            client_cpu_s,
            aborted_workers: outcome.aborted_workers,
        }
    }

    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} {} x{} connections, {:.1} s measured ({} warm-up logins in {:.1} s)",
            self.bootstrap,
            self.mechanism,
            self.connections,
            self.measured_s,
            self.warmup_logins,
            self.warmup_s
        );
        let _ = writeln!(
            out,
            "  logins: {} ok, {} failed, {:.1} logins/s",
            self.logins, self.failures_total, self.logins_per_s
        );
        if let Some(l) = &self.latency {
            let _ = writeln!(
                out,
                "  latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}  mean {:.3}",
                l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms, l.mean_ms
            );
        }
        for (reason, n) in &self.failures {
            let _ = writeln!(out, "  failure x{n}: {reason}");
        }
        if let Some(cpu) = self.client_cpu_s {
            let _ = writeln!(out, "  client CPU: {cpu:.2} s");
        }
        if self.aborted_workers > 0 {
            let _ = writeln!(
                out,
                "  {} workers aborted at the hard deadline",
                self.aborted_workers
            );
        }
        out
    }
}

/// User + system CPU seconds of this process so far, from /proc/self/stat (Linux; USER_HZ is
/// 100 on every Linux ABI the tool targets). `None` where that file does not exist.
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces; the fields after its ')' are fixed.
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after_name.split_whitespace();
    // Fields 3.. follow; utime and stime are fields 14 and 15, i.e. the 12th and 13th here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}
