//! `relay-io`: a side-by-side benchmark of an L4 byte relay on tokio (epoll readiness) and on
//! tokio-uring (io_uring completions), for issue 24: adopt io_uring in Portcullis' data path only
//! if it wins on the kernel it runs on. A `splice(2)` mode on tokio shows what removing the
//! relay's copies through user space is worth.
//!
//! - `relay-io relay --mode tokio-mt|tokio-ct|uring|splice|one-task --listen ADDR --upstream ADDR`
//!   is the relay under test: per accepted connection it connects to the upstream and copies bytes
//!   both ways, one task per direction, reading up to 256 KiB and writing what was read (the shape
//!   of Portcullis' request and response sides, without the Kafka parsing); `splice` moves them
//!   socket → pipe → socket with splice(2) instead, without copying them through user space;
//!   `one-task` drives both directions from one task.
//! - `relay-io bench` is the harness: a synthetic broker and the consumers run in its process,
//!   each relay in a child process of its own, so the relay's CPU time and context switches can
//!   be read from /proc alone. Every run is compared with the consumers talking to the broker
//!   directly. See README.md for how to read the table.
#![forbid(unsafe_code)]

mod bench;
mod broker;
mod clients;
mod procstat;
mod relay;
mod report;
mod wire;

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// The I/O model a relay runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// tokio, multi-thread runtime with its default workers (one per core): Portcullis' runtime.
    TokioMt,
    /// tokio, current-thread runtime: one thread, like tokio-uring.
    TokioCt,
    /// tokio-uring: io_uring completions with owned buffers, on one thread.
    Uring,
    /// tokio multi-thread like tokio-mt, the bytes moved with splice(2) through a pipe per
    /// direction: no copy through user space.
    Splice,
    /// tokio multi-thread like tokio-mt, but one task per connection drives both directions
    /// (`copy_bidirectional`): the design issue 24's item 1 proposes, without Portcullis around it.
    OneTask,
}

impl Mode {
    /// The name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Mode::TokioMt => "tokio-mt",
            Mode::TokioCt => "tokio-ct",
            Mode::Uring => "uring",
            Mode::Splice => "splice",
            Mode::OneTask => "one-task",
        }
    }
}

/// Which way the large messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// Small requests, large responses: a consumer's Fetch.
    Consume,
    /// Large requests, small responses: a producer's Produce.
    Produce,
}

impl Shape {
    /// The name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Consume => "consume",
            Shape::Produce => "produce",
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "relay-io",
    about = "Side-by-side benchmark of a Kafka-shaped byte relay on tokio and on tokio-uring (issue 24)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs one relay until it is killed (the bench starts it as a child process).
    Relay(relay::RelayArgs),
    /// Runs the side-by-side benchmark and prints a markdown table.
    Bench(bench::BenchArgs),
}

/// Where `relay` prints the address it listens on, one line on stdout, for the bench to read.
pub const LISTENING_PREFIX: &str = "listening ";

/// Parses the line a relay prints once it listens.
pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    line.trim().strip_prefix(LISTENING_PREFIX)?.parse().ok()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Relay(args) => relay::run(&args),
        Command::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay-io: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_round_trips() {
        let line = format!("{LISTENING_PREFIX}127.0.0.1:4242\n");
        assert_eq!(
            parse_listening(&line),
            Some("127.0.0.1:4242".parse().unwrap())
        );
        assert_eq!(parse_listening("something else"), None);
    }

    #[test]
    fn the_cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn mode_names_match_the_command_line() {
        for mode in Mode::value_variants() {
            let parsed = Mode::from_str(mode.name(), false).unwrap();
            assert_eq!(parsed, *mode);
        }
    }
}
