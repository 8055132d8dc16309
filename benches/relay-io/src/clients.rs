//! The consumers (or producers, in the produce shape): blocking std I/O, a thread per
//! connection. Each loops over exchanges — send a request, read and check the whole response —
//! taking them from a shared count until the run's total has been done.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::broker::Exchange;
use crate::wire::{io_error, Inbound, Outbound};

/// One client connection, connected and warmed up.
pub struct Connection {
    stream: TcpStream,
    request: Outbound,
    responses: Inbound,
    /// The number of the next exchange on this connection.
    next: u64,
}

impl Connection {
    /// Connects and does one exchange, so the relay has connected to the broker and every buffer
    /// has been touched before the clock starts.
    pub fn open(address: SocketAddr, exchange: Exchange) -> Result<Self> {
        let stream = TcpStream::connect_timeout(&address, exchange.timeout)
            .with_context(|| format!("connecting to {address}"))?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        stream
            .set_read_timeout(Some(exchange.timeout))
            .and_then(|()| stream.set_write_timeout(Some(exchange.timeout)))
            .context("setting the socket timeouts")?;
        let mut connection = Self {
            stream,
            request: Outbound::new(exchange.request)?,
            responses: Inbound::new(exchange.response, exchange.verify_every),
            next: 0,
        };
        connection.exchange().context("the warm-up exchange")?;
        Ok(connection)
    }

    fn exchange(&mut self) -> Result<()> {
        let number = self.next;
        self.request.stamp(number);
        self.stream
            .write_all(self.request.bytes())
            .map_err(io_error)
            .with_context(|| format!("writing request {number}"))?;
        if !self.responses.receive(&mut self.stream, number)? {
            bail!("the connection was closed before response {number}");
        }
        self.next += 1;
        Ok(())
    }

    /// Does exchanges while the shared count has some left and no other connection failed.
    fn drain(mut self, remaining: &AtomicU64, failed: &AtomicBool) -> Result<()> {
        while take_one(remaining) {
            if failed.load(Ordering::Relaxed) {
                bail!("stopped: another connection failed");
            }
            self.exchange()?;
        }
        Ok(())
    }
}

/// Takes one exchange from the shared count; false when none is left.
fn take_one(remaining: &AtomicU64) -> bool {
    remaining
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// Runs `exchanges` exchanges over the connections, all started at once, and returns the time
/// from the start to the end of the last one. The connections are closed on return.
pub fn run(connections: Vec<Connection>, exchanges: u64) -> Result<Duration> {
    let remaining = Arc::new(AtomicU64::new(exchanges));
    let failed = Arc::new(AtomicBool::new(false));
    // The connections wait here, so none starts before the clock does.
    let start = Arc::new(Barrier::new(connections.len() + 1));
    let mut threads = Vec::with_capacity(connections.len());
    for (index, connection) in connections.into_iter().enumerate() {
        let (remaining, failed, start) = (
            Arc::clone(&remaining),
            Arc::clone(&failed),
            Arc::clone(&start),
        );
        let thread = thread::Builder::new()
            .name(format!("client-{index}"))
            .spawn(move || {
                start.wait();
                let drained = connection.drain(&remaining, &failed);
                if drained.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                drained.with_context(|| format!("connection {index}"))
            })
            .context("starting a client thread")?;
        threads.push(thread);
    }
    let started = Instant::now();
    start.wait();
    let mut first_error = None;
    for thread in threads {
        let outcome = thread
            .join()
            .map_err(|_| anyhow!("a client thread panicked"))
            .and_then(|drained| drained);
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }
    let elapsed = started.elapsed();
    if let Some(e) = first_error {
        return Err(e);
    }
    let left = remaining.load(Ordering::Relaxed);
    ensure!(left == 0, "{left} exchanges were not done");
    Ok(elapsed)
}
