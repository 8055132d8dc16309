//! The synthetic broker: blocking std I/O, a thread per connection, so its cost is plain and the
//! same for every mode. For each request frame it reads and checks, it answers with one
//! preallocated response frame written with one `write_all`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::wire::{io_error, Inbound, Outbound};

/// What one exchange carries, for both ends.
#[derive(Debug, Clone, Copy)]
pub struct Exchange {
    /// The client's request payload.
    pub request: usize,
    /// The broker's response payload.
    pub response: usize,
    /// Compare the whole payload of every n-th frame.
    pub verify_every: u64,
    /// How long a read or a write may wait.
    pub timeout: Duration,
}

/// A broker listening on a free loopback port; its threads live as long as the process.
pub struct Broker {
    address: SocketAddr,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Connections being served.
    active: AtomicUsize,
    /// What went wrong on a connection since the last [`Broker::check`].
    errors: Mutex<Vec<String>>,
}

impl State {
    fn record(&self, error: String) {
        // A poisoned lock only means another thread panicked while pushing: the list is intact.
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors.push(error);
    }
}

impl Broker {
    pub fn start(exchange: Exchange) -> Result<Self> {
        // Built once here, so a bad size fails the start rather than every connection.
        Outbound::new(exchange.response)?;
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding the broker's port")?;
        let address = listener
            .local_addr()
            .context("reading the broker's address")?;
        let state = Arc::new(State::default());
        let accepting = Arc::clone(&state);
        thread::Builder::new()
            .name("broker-accept".into())
            .spawn(move || accept_loop(&listener, exchange, &accepting))
            .context("starting the broker's accept thread")?;
        Ok(Self { address, state })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Fails with what went wrong on the broker's connections since the last call.
    pub fn check(&self) -> Result<()> {
        let mut errors = self.state.errors.lock().unwrap_or_else(|p| p.into_inner());
        let found = std::mem::take(&mut *errors);
        match found.first() {
            None => Ok(()),
            Some(first) => bail!(
                "the broker failed on {} connection(s), the first: {first}",
                found.len()
            ),
        }
    }

    /// Waits until every connection has been closed by its peer: once the consumers have closed
    /// theirs, a relay must close its upstream connections too.
    pub fn wait_idle(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let active = self.state.active.load(Ordering::Acquire);
            if active == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{active} broker connection(s) still open {timeout:?} after the consumers closed theirs"
                );
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

fn accept_loop(listener: &TcpListener, exchange: Exchange, state: &Arc<State>) {
    for accepted in listener.incoming() {
        let stream = match accepted {
            Ok(stream) => stream,
            Err(e) => {
                state.record(format!("accepting a connection: {e}"));
                continue;
            }
        };
        state.active.fetch_add(1, Ordering::AcqRel);
        let serving = Arc::clone(state);
        let spawned = thread::Builder::new()
            .name("broker-conn".into())
            .spawn(move || {
                if let Err(e) = serve(stream, exchange) {
                    serving.record(format!("{e:#}"));
                }
                serving.active.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            state.active.fetch_sub(1, Ordering::AcqRel);
            state.record(format!("starting a connection thread: {e}"));
        }
    }
}

/// Answers requests until the peer closes the connection between two requests.
fn serve(mut stream: TcpStream, exchange: Exchange) -> Result<()> {
    stream.set_nodelay(true).context("TCP_NODELAY")?;
    stream
        .set_read_timeout(Some(exchange.timeout))
        .and_then(|()| stream.set_write_timeout(Some(exchange.timeout)))
        .context("setting the socket timeouts")?;
    let mut requests = Inbound::new(exchange.request, exchange.verify_every);
    let mut response = Outbound::new(exchange.response)?;
    for number in 0.. {
        if !requests
            .receive(&mut stream, number)
            .context("broker: receiving a request")?
        {
            break;
        }
        response.stamp(number);
        std::io::Write::write_all(&mut stream, response.bytes())
            .map_err(io_error)
            .with_context(|| format!("broker: writing response {number}"))?;
    }
    Ok(())
}
