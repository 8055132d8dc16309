//! The harness: a synthetic broker and the clients in this process, each relay in a child process
//! (this executable's `relay` subcommand) so that its CPU time and context switches are its own.
//!
//! Per shape, one broker serves every run. Each round runs every target once — `direct` (clients
//! to broker) and each relay mode — in an order rotated by one each round, so no mode always runs
//! first or right after another. A run starts a fresh relay, opens the connections and does one
//! warm-up exchange on each, samples the relay's counters, runs the exchanges against the clock,
//! samples again, waits until the relay has closed its upstream connections, and kills it.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::Args;

use crate::broker::{Broker, Exchange};
use crate::clients::{self, Connection};
use crate::procstat::{self, Sample};
use crate::report::{self, Cost, Run, Target};
use crate::wire::{MIN_PAYLOAD, SMALL_PAYLOAD};
use crate::{parse_listening, Mode, Shape};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// `relay-io bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The relay modes, comma-separated; `direct` (no relay) always runs as the baseline.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tokio-mt,tokio-ct,uring,splice"
    )]
    modes: Vec<Mode>,
    /// consume: 64-byte requests, large responses (a Fetch); produce: large requests, 64-byte
    /// responses (a Produce). Comma-separated for both.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "consume")]
    shape: Vec<Shape>,
    /// Client connections, each doing exchanges one after the other.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// The large payload of an exchange, in bytes: the response of a consume, the request of a
    /// produce.
    #[arg(long, default_value_t = 1 << 20)]
    response_bytes: usize,
    /// GiB of large payloads per run, over all connections.
    #[arg(long, default_value_t = 2.0)]
    gib: f64,
    /// Rounds; every round runs each target once.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Compare the whole payload of every n-th frame of a connection (1: every frame; 0: never,
    /// only the size, stamp and sampled bytes of every frame).
    #[arg(long, default_value_t = 16)]
    verify_every: u64,
    /// How long a connect, a read or a write may wait before the run fails.
    #[arg(long, default_value_t = 10)]
    timeout_secs: u64,
}

/// The validated settings of a bench.
struct Plan {
    shapes: Vec<Shape>,
    targets: Vec<Target>,
    connections: usize,
    large_payload: usize,
    /// Exchanges per run, over all connections.
    exchanges: u64,
    rounds: usize,
    verify_every: u64,
    timeout: Duration,
}

impl Plan {
    fn new(args: &BenchArgs) -> Result<Self> {
        ensure!(args.connections >= 1, "--connections must be at least 1");
        ensure!(args.rounds >= 1, "--rounds must be at least 1");
        ensure!(args.timeout_secs >= 1, "--timeout-secs must be at least 1");
        ensure!(
            args.gib.is_finite() && args.gib > 0.0,
            "--gib must be a positive number"
        );
        ensure!(
            (MIN_PAYLOAD..=i32::MAX as usize).contains(&args.response_bytes),
            "--response-bytes must be from {MIN_PAYLOAD} to {}",
            i32::MAX
        );
        let exchanges = (args.gib * GIB / args.response_bytes as f64).ceil() as u64;
        let mut targets = vec![Target::Direct];
        for &mode in &args.modes {
            if !targets.contains(&Target::Relay(mode)) {
                targets.push(Target::Relay(mode));
            }
        }
        let mut shapes = args.shape.clone();
        shapes.dedup();
        Ok(Self {
            shapes,
            targets,
            connections: args.connections,
            large_payload: args.response_bytes,
            exchanges: exchanges.max(1),
            rounds: args.rounds,
            verify_every: args.verify_every,
            timeout: Duration::from_secs(args.timeout_secs),
        })
    }

    fn exchange(&self, shape: Shape) -> Exchange {
        let (request, response) = match shape {
            Shape::Consume => (SMALL_PAYLOAD, self.large_payload),
            Shape::Produce => (self.large_payload, SMALL_PAYLOAD),
        };
        Exchange {
            request,
            response,
            verify_every: self.verify_every,
            timeout: self.timeout,
        }
    }

    /// The large payload bytes one run moves.
    fn bytes_per_run(&self) -> f64 {
        self.exchanges as f64 * self.large_payload as f64
    }

    fn describe(&self) -> String {
        format!(
            "per run: {:.3} GiB of large payloads ({} exchanges of {} bytes) over {} connection(s); \
             {} round(s), the targets' order rotated each round; whole-payload check every {} frame(s)",
            self.bytes_per_run() / GIB,
            self.exchanges,
            self.large_payload,
            self.connections,
            self.rounds,
            self.verify_every,
        )
    }
}

/// Runs the bench and prints the header, then the table.
pub fn run(args: &BenchArgs) -> Result<()> {
    let plan = Plan::new(args)?;
    let ticks_per_second = procstat::clock_ticks_per_second()?;
    let exe = std::env::current_exe().context("finding this executable, to start the relays")?;
    println!("{}", report::header(&plan.describe(), ticks_per_second));
    let mut runs = Vec::new();
    for &shape in &plan.shapes {
        let broker = Broker::start(plan.exchange(shape)).context("starting the broker")?;
        for round in 0..plan.rounds {
            for target in rotated(&plan.targets, round) {
                let run = run_one(&plan, shape, target, round, &broker, &exe, ticks_per_second)
                    .with_context(|| {
                        format!(
                            "{} through {}, round {}",
                            shape.name(),
                            target.name(),
                            round + 1
                        )
                    })?;
                eprintln!(
                    "{}",
                    progress(&run, plan.rounds, plan.bytes_per_run() / GIB)
                );
                runs.push(run);
            }
        }
    }
    println!(
        "{}",
        report::table(&runs, &plan.shapes, &plan.targets, plan.connections)
    );
    Ok(())
}

/// The targets in round `round`'s order.
fn rotated(targets: &[Target], round: usize) -> Vec<Target> {
    let mut order = targets.to_vec();
    if !targets.is_empty() {
        order.rotate_left(round % targets.len());
    }
    order
}

/// One line per run on stderr. The relay's CPU seconds of the whole run are shown too: they come
/// in clock ticks (10 ms), so they tell how coarse the per-GiB figure is.
fn progress(run: &Run, rounds: usize, gib: f64) -> String {
    let cost = run.relay.map_or_else(String::new, |c| {
        format!(
            "; relay {:.3} CPU s/GiB ({:.2} s in the run), {:.0} voluntary + {:.0} involuntary switches/GiB",
            c.cpu_seconds,
            c.cpu_seconds * gib,
            c.voluntary_switches,
            c.involuntary_switches
        )
    });
    format!(
        "round {}/{rounds} {} {}: {:.0} MiB/s{cost}",
        run.round + 1,
        run.shape.name(),
        run.target.name(),
        run.mib_per_second
    )
}

fn run_one(
    plan: &Plan,
    shape: Shape,
    target: Target,
    round: usize,
    broker: &Broker,
    exe: &Path,
    ticks_per_second: u64,
) -> Result<Run> {
    let exchange = plan.exchange(shape);
    let mut relay = match target {
        Target::Direct => None,
        Target::Relay(mode) => Some(RelayProcess::start(
            exe,
            mode,
            broker.address(),
            plan.timeout,
        )?),
    };
    let address = relay
        .as_ref()
        .map_or(broker.address(), |relay| relay.address);
    let connections = (0..plan.connections)
        .map(|i| {
            Connection::open(address, exchange).with_context(|| format!("opening connection {i}"))
        })
        .collect::<Result<Vec<_>>>()
        .map_err(|e| explain(e, broker, relay.as_mut()))?;
    let before = relay.as_ref().map(RelayProcess::sample).transpose()?;
    let elapsed = clients::run(connections, plan.exchanges)
        .map_err(|e| explain(e, broker, relay.as_mut()))?;
    let after = relay.as_ref().map(RelayProcess::sample).transpose()?;
    broker
        .wait_idle(plan.timeout)
        .context("the relay did not pass the consumers' close on to the broker")?;
    broker.check()?;
    let gib = plan.bytes_per_run() / GIB;
    let cost = match (relay.as_mut(), before, after) {
        (Some(relay), Some(before), Some(after)) => {
            relay.ensure_running()?;
            let spent = procstat::spent(&before, &after, ticks_per_second);
            Some(Cost {
                cpu_seconds: spent.cpu_seconds / gib,
                voluntary_switches: spent.switches.voluntary as f64 / gib,
                involuntary_switches: spent.switches.involuntary as f64 / gib,
            })
        }
        _ => None,
    };
    Ok(Run {
        shape,
        target,
        round,
        mib_per_second: plan.bytes_per_run() / MIB / elapsed.as_secs_f64(),
        relay: cost,
    })
}

/// Adds to a client failure what the broker saw meanwhile and whether the relay died.
fn explain(
    error: anyhow::Error,
    broker: &Broker,
    relay: Option<&mut RelayProcess>,
) -> anyhow::Error {
    let mut notes = Vec::new();
    if let Err(broker_error) = broker.check() {
        notes.push(format!("{broker_error:#}"));
    }
    if let Some(Err(relay_error)) = relay.map(|r| r.ensure_running()) {
        notes.push(format!("{relay_error:#}"));
    }
    if notes.is_empty() {
        error
    } else {
        anyhow!("{error:#} (meanwhile: {})", notes.join("; "))
    }
}

/// A relay child process, killed when dropped.
struct RelayProcess {
    child: KillOnDrop,
    address: SocketAddr,
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // It may have exited already; either way it is reaped.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl RelayProcess {
    fn start(exe: &Path, mode: Mode, upstream: SocketAddr, timeout: Duration) -> Result<Self> {
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut child = Command::new(exe)
            .args(["relay", "--mode", mode.name()])
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--upstream")
            .arg(upstream.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| {
                format!("starting `{} relay --mode {}`", exe.display(), mode.name())
            })?;
        let stdout = child.stdout.take();
        let child = KillOnDrop(child);
        let stdout = stdout.context("the relay's stdout was not piped")?;
        let address = read_address(stdout, timeout)?;
        Ok(Self { child, address })
    }

    fn sample(&self) -> Result<Sample> {
        procstat::sample(self.child.0.id()).context("sampling the relay's counters")
    }

    fn ensure_running(&mut self) -> Result<()> {
        match self.child.0.try_wait().context("checking on the relay")? {
            None => Ok(()),
            Some(status) => bail!("the relay exited during the run ({status})"),
        }
    }
}

/// Reads the address the relay prints once it listens. In a thread, so that a relay that hangs
/// before printing fails the run after `timeout` rather than blocking it.
fn read_address(stdout: ChildStdout, timeout: Duration) -> Result<SocketAddr> {
    let (sender, receiver) = mpsc::channel();
    thread::Builder::new()
        .name("relay-stdout".into())
        .spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = sender.send(read);
        })
        .context("starting the thread that reads the relay's stdout")?;
    let line = receiver
        .recv_timeout(timeout)
        .map_err(|_| anyhow!("the relay did not print its address within {timeout:?}"))?
        .context("reading the relay's stdout")?;
    if line.is_empty() {
        bail!("the relay exited before it listened (its error is above)");
    }
    parse_listening(&line)
        .with_context(|| format!("the relay printed {line:?} instead of its address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_starts_with_another_target() {
        let targets = [
            Target::Direct,
            Target::Relay(Mode::TokioMt),
            Target::Relay(Mode::Uring),
        ];
        let firsts: Vec<Target> = (0..3).map(|r| rotated(&targets, r)[0]).collect();
        assert_eq!(firsts, targets);
        assert_eq!(rotated(&targets, 3), targets);
    }
}
