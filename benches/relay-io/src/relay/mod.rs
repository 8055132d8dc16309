//! The relay under test: an L4 relay that, for every accepted connection, connects to the
//! upstream and copies bytes both ways until either side closes.
//!
//! Each mode but `one-task` keeps the shape of Portcullis' data path: one task per direction
//! (its request and response sides), each reading up to [`READ_BYTES`] and writing what it read
//! before reading again (`splice`: moving up to [`READ_BYTES`] into a pipe, and all of it out
//! before the next), with `TCP_NODELAY` on both sockets. The first direction to end (end of
//! stream or an error) ends the connection: both sockets are closed, so each peer sees the close.
//!
//! `one-task` polls both directions from one task, with a buffer of [`READ_BYTES`] each way; at
//! one side's end of stream it shuts down the other side's writing, and it ends when both have
//! ended or on the first error.

mod on_tokio;
mod on_uring;
mod splice;

use std::io::Write;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use clap::Args;

use crate::{Mode, LISTENING_PREFIX};
use on_tokio::{Tasks, Transfer};

/// The most one read takes: what Portcullis' response side offers a read while a response is
/// awaited (host/src/server/responses.rs, `RESPONSE_READ`), so one read takes as much of a large
/// Fetch response as the socket holds.
pub const READ_BYTES: usize = 256 * 1024;

/// `relay-io relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// The I/O model.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// The address to listen on (port 0: any free port; the address is printed on stdout).
    #[arg(long)]
    pub listen: SocketAddr,
    /// The address every accepted connection is relayed to.
    #[arg(long)]
    pub upstream: SocketAddr,
}

/// Runs the relay until the process is killed.
pub fn run(args: &RelayArgs) -> Result<()> {
    match args.mode {
        Mode::TokioMt => on_tokio::run(
            tokio::runtime::Builder::new_multi_thread(),
            Tasks::PerDirection(Transfer::Buffered),
            args.listen,
            args.upstream,
        ),
        Mode::TokioCt => on_tokio::run(
            tokio::runtime::Builder::new_current_thread(),
            Tasks::PerDirection(Transfer::Buffered),
            args.listen,
            args.upstream,
        ),
        Mode::Splice => on_tokio::run(
            tokio::runtime::Builder::new_multi_thread(),
            Tasks::PerDirection(Transfer::Splice),
            args.listen,
            args.upstream,
        ),
        Mode::OneTask => on_tokio::run(
            tokio::runtime::Builder::new_multi_thread(),
            Tasks::OneForBoth,
            args.listen,
            args.upstream,
        ),
        Mode::Uring => on_uring::run(args.listen, args.upstream),
    }
    .with_context(|| format!("relay ({})", args.mode.name()))
}

/// Tells the bench where the relay listens: the one line it prints on stdout, flushed at once
/// because stdout is a pipe (block-buffered) when the bench reads it.
fn announce(address: SocketAddr) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{LISTENING_PREFIX}{address}")
        .and_then(|()| stdout.flush())
        .context("printing the listening address")
}

/// Reports a connection that ended with an error; the relay goes on with the others. The bench
/// notices the failure itself, on the consumer's side.
fn report_connection_error(error: &anyhow::Error) {
    eprintln!("relay-io relay: connection failed: {error:#}");
}
