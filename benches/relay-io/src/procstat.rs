//! What the relay process cost, read from /proc: CPU time (user + system, all threads, in clock
//! ticks) and context switches (voluntary: the thread waited; involuntary: it was preempted).
//!
//! The CPU time of /proc/PID/stat covers threads that exited during the run; the context
//! switches are only kept per thread (/proc/PID/task/TID/status), so those of a thread that
//! exited between the two samples are lost (tokio's and io_uring's worker threads of this relay
//! live as long as the process, unless io_uring starts io-wq workers for blocking work).

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// One thread's context switches so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    pub voluntary: u64,
    pub involuntary: u64,
}

/// The counters of a process at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    cpu_ticks: u64,
    threads: BTreeMap<u32, Switches>,
}

/// What a process spent between two samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spent {
    pub cpu_seconds: f64,
    pub switches: Switches,
}

/// The unit of the CPU times in /proc/PID/stat (`getconf CLK_TCK`, 100 on Linux).
pub fn clock_ticks_per_second() -> Result<u64> {
    let output = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("running `getconf CLK_TCK`")?;
    if !output.status.success() {
        bail!("`getconf CLK_TCK` failed: {}", output.status);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    match text.trim().parse() {
        Ok(ticks) if ticks > 0 => Ok(ticks),
        _ => bail!("`getconf CLK_TCK` printed {text:?}"),
    }
}

/// Samples process `pid`.
pub fn sample(pid: u32) -> Result<Sample> {
    let stat_path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&stat_path).with_context(|| format!("reading {stat_path}"))?;
    let cpu_ticks = cpu_ticks(&stat).with_context(|| format!("parsing {stat_path}"))?;
    let task_dir = format!("/proc/{pid}/task");
    let mut threads = BTreeMap::new();
    for entry in fs::read_dir(&task_dir).with_context(|| format!("listing {task_dir}"))? {
        let entry = entry.with_context(|| format!("listing {task_dir}"))?;
        let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let status_path = format!("{task_dir}/{tid}/status");
        match fs::read_to_string(&status_path) {
            Ok(status) => {
                let switches =
                    switches(&status).with_context(|| format!("parsing {status_path}"))?;
                threads.insert(tid, switches);
            }
            // The thread exited since the directory was listed.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {status_path}")),
        }
    }
    Ok(Sample { cpu_ticks, threads })
}

/// What was spent from `before` to `after`. A thread that started in between counts from zero.
pub fn spent(before: &Sample, after: &Sample, ticks_per_second: u64) -> Spent {
    let mut switches = Switches::default();
    for (tid, now) in &after.threads {
        let then = before.threads.get(tid).copied().unwrap_or_default();
        switches.voluntary += now.voluntary.saturating_sub(then.voluntary);
        switches.involuntary += now.involuntary.saturating_sub(then.involuntary);
    }
    let ticks = after.cpu_ticks.saturating_sub(before.cpu_ticks);
    Spent {
        cpu_seconds: ticks as f64 / ticks_per_second as f64,
        switches,
    }
}

/// utime + stime from the text of /proc/PID/stat. The command name (field 2) is in parentheses
/// and may itself hold spaces and parentheses, so the fields are counted after the last `)`:
/// field 3 (state) is the first there, utime and stime are fields 14 and 15.
fn cpu_ticks(stat: &str) -> Result<u64> {
    let (_, fields) = stat
        .rsplit_once(')')
        .context("no `)` after the command name")?;
    let mut fields = fields.split_whitespace().skip(14 - 3);
    let mut next = |name: &str| -> Result<u64> {
        fields
            .next()
            .with_context(|| format!("no {name} field"))?
            .parse()
            .with_context(|| format!("a non-numeric {name}"))
    };
    Ok(next("utime")? + next("stime")?)
}

/// The two context switch counters from the text of /proc/PID/task/TID/status.
fn switches(status: &str) -> Result<Switches> {
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .with_context(|| format!("no {name} line"))?
            .trim()
            .parse()
            .with_context(|| format!("a non-numeric {name}"))
    };
    Ok(Switches {
        voluntary: field("voluntary_ctxt_switches")?,
        involuntary: field("nonvoluntary_ctxt_switches")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime …
        let stat = "4242 (relay (io) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0";
        assert_eq!(cpu_ticks(stat).unwrap(), 325);
        assert!(cpu_ticks("4242 (relay) S 1").is_err());
    }

    #[test]
    fn switches_are_read_from_the_status() {
        let status =
            "Name:\trelay-io\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(
            switches(status).unwrap(),
            Switches {
                voluntary: 120,
                involuntary: 7
            }
        );
        assert!(switches("Name:\trelay-io\n").is_err());
    }

    #[test]
    fn spent_counts_new_threads_from_zero() {
        let before = Sample {
            cpu_ticks: 10,
            threads: BTreeMap::from([(
                1,
                Switches {
                    voluntary: 5,
                    involuntary: 1,
                },
            )]),
        };
        let after = Sample {
            cpu_ticks: 60,
            threads: BTreeMap::from([
                (
                    1,
                    Switches {
                        voluntary: 15,
                        involuntary: 2,
                    },
                ),
                (
                    2,
                    Switches {
                        voluntary: 3,
                        involuntary: 4,
                    },
                ),
            ]),
        };
        let spent = spent(&before, &after, 100);
        assert_eq!(spent.cpu_seconds, 0.5);
        assert_eq!(
            spent.switches,
            Switches {
                voluntary: 13,
                involuntary: 5
            }
        );
    }

    #[test]
    fn this_process_can_be_sampled() {
        let sample = sample(std::process::id()).unwrap();
        assert!(!sample.threads.is_empty());
        assert!(clock_ticks_per_second().unwrap() > 0);
    }
}
