//! What the bench prints: the machine and versions at the top, a markdown table at the end.

use std::fmt::Write as _;
use std::fs;

use crate::{Mode, Shape};

/// Where the consumers' bytes go: straight to the broker, or through a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Direct,
    Relay(Mode),
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Relay(mode) => mode.name(),
        }
    }
}

/// The relay's cost per GiB of large payloads moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub cpu_seconds: f64,
    pub voluntary_switches: f64,
    pub involuntary_switches: f64,
}

/// One measured run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    pub shape: Shape,
    pub target: Target,
    /// From 0.
    pub round: usize,
    pub mib_per_second: f64,
    /// `None` for [`Target::Direct`].
    pub relay: Option<Cost>,
}

/// The crate versions the relays were built with, read from the workspace's Cargo.lock at
/// compile time (include_str! rebuilds this crate when the lock file changes).
const CARGO_LOCK: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"));
const REPORTED_CRATES: [&str; 4] = ["tokio", "tokio-uring", "io-uring", "rustix"];

/// `name version` for each reported crate (every version, if the lock file holds several).
fn crate_versions(lock: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("name = \"")
            .and_then(|rest| rest.strip_suffix('"'))
        else {
            continue;
        };
        if !REPORTED_CRATES.contains(&name) {
            continue;
        }
        let version = lines
            .next()
            .and_then(|l| l.strip_prefix("version = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or("?");
        found.push(format!("{name} {version}"));
    }
    found
}

/// The CPU's model name, from /proc/cpuinfo.
fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split_once(':')?
                        .1
                        .trim()
                        .to_owned(),
                )
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The kernel release, what `uname -r` prints.
fn kernel() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The command line, quoted where an argument would otherwise split.
fn command_line() -> String {
    std::env::args()
        .map(|arg| {
            if arg.is_empty() || arg.contains(char::is_whitespace) {
                format!("'{arg}'")
            } else {
                arg
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The lines printed before the runs: what ran, on what.
pub fn header(settings: &str, ticks_per_second: u64) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let io_uring_disabled = fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|_| "absent".into());
    let mut out = String::new();
    let _ = writeln!(out, "## relay-io bench\n");
    let _ = writeln!(out, "- command: `{}`", command_line());
    let _ = writeln!(
        out,
        "- kernel: {} (kernel.io_uring_disabled = {io_uring_disabled})",
        kernel()
    );
    let _ = writeln!(out, "- CPU: {}; nproc {cores}", cpu_model());
    let _ = writeln!(out, "- crates: {}", crate_versions(CARGO_LOCK).join(", "));
    let _ = writeln!(
        out,
        "- clock ticks: {ticks_per_second}/s (the unit of the relay's CPU time)"
    );
    let _ = writeln!(out, "- {settings}");
    out
}

/// The median; for an even count, the mean of the middle two.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => sorted.get(middle).copied(),
        _ => Some((sorted.get(middle - 1)? + sorted.get(middle)?) / 2.0),
    }
}

fn cell(value: Option<f64>, decimals: usize, suffix: &str) -> String {
    value.map_or_else(|| "—".into(), |v| format!("{v:.decimals$}{suffix}"))
}

/// The markdown table: one row per shape and target, medians over the rounds.
pub fn table(runs: &[Run], shapes: &[Shape], targets: &[Target], connections: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| mode | shape | connections | MiB/s per round | MiB/s median | × direct (median) \
         | relay CPU s/GiB | relay voluntary switches/GiB | relay involuntary switches/GiB |"
    );
    let _ = writeln!(out, "|---|---|---:|---|---:|---:|---:|---:|---:|");
    for &shape in shapes {
        for &target in targets {
            let mut rows: Vec<&Run> = runs
                .iter()
                .filter(|r| r.shape == shape && r.target == target)
                .collect();
            rows.sort_by_key(|r| r.round);
            let speeds: Vec<f64> = rows.iter().map(|r| r.mib_per_second).collect();
            let ratios: Vec<f64> = rows
                .iter()
                .filter_map(|r| {
                    let direct = runs.iter().find(|d| {
                        d.shape == shape && d.round == r.round && d.target == Target::Direct
                    })?;
                    Some(r.mib_per_second / direct.mib_per_second)
                })
                .collect();
            let costs: Vec<Cost> = rows.iter().filter_map(|r| r.relay).collect();
            let cost_median =
                |f: fn(&Cost) -> f64| median(&costs.iter().map(f).collect::<Vec<_>>());
            let per_round = speeds
                .iter()
                .map(|s| format!("{s:.0}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                out,
                "| {} | {} | {connections} | {per_round} | {} | {} | {} | {} | {} |",
                target.name(),
                shape.name(),
                cell(median(&speeds), 0, ""),
                cell(median(&ratios), 2, "×"),
                cell(cost_median(|c| c.cpu_seconds), 3, ""),
                cell(cost_median(|c| c.voluntary_switches), 0, ""),
                cell(cost_median(|c| c.involuntary_switches), 0, ""),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn versions_are_found_in_a_lock_file() {
        let lock = "[[package]]\nname = \"tokio\"\nversion = \"1.2.3\"\n\n[[package]]\nname = \"tokio-util\"\nversion = \"0.7.0\"\n\n[[package]]\nname = \"io-uring\"\nversion = \"0.6.4\"\n";
        assert_eq!(crate_versions(lock), ["tokio 1.2.3", "io-uring 0.6.4"]);
        assert!(crate_versions(CARGO_LOCK)
            .iter()
            .any(|v| v.starts_with("tokio-uring ")));
    }

    #[test]
    fn the_table_has_ratios_to_direct_and_no_cost_for_direct() {
        let run = |target, round, speed, cpu: Option<f64>| Run {
            shape: Shape::Consume,
            target,
            round,
            mib_per_second: speed,
            relay: cpu.map(|c| Cost {
                cpu_seconds: c,
                voluntary_switches: 10.0,
                involuntary_switches: 1.0,
            }),
        };
        let uring = Target::Relay(Mode::Uring);
        let runs = [
            run(Target::Direct, 0, 1000.0, None),
            run(uring, 0, 500.0, Some(0.5)),
            run(Target::Direct, 1, 2000.0, None),
            run(uring, 1, 1500.0, Some(0.25)),
        ];
        let table = table(&runs, &[Shape::Consume], &[Target::Direct, uring], 1);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(
            lines[2],
            "| direct | consume | 1 | 1000, 2000 | 1500 | 1.00× | — | — | — |"
        );
        assert_eq!(
            lines[3],
            "| uring | consume | 1 | 500, 1500 | 1000 | 0.62× | 0.375 | 10 | 1 |"
        );
    }
}
