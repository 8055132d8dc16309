//! One client connection: a single task that reads the client's frames and the upstream's
//! responses, feeds frames to the framework's [`Connection`], carries out the [`Action`]s it
//! returns, writes responses back in request order, and closes the connection properly.
//!
//! ```text
//!            ┌──────────── select! ────────────┐
//! client ──► FrameReader ─► Connection::handle_frame ─► Respond ─────────────► ResponseQueue ─► client
//!                                                    └► Forward ─► upstream ─► (response) ─┘
//! ```
//!
//! A connection goes through explicit phases ([`Phase`]):
//!
//! ```text
//! Serving ──(session expired, server stopping)──► Draining ──► Closing
//!    │    ──(failed authentication)─► Delaying ──► Draining ──► Closing
//!    │    ──(protocol violation, revoked, idle, upstream gone, …)──────► Closing
//!    └────(client closed, socket error)─────────────────────────────────► Gone
//! ```
//!
//! - **Serving** reads requests and the upstream at the same time. The upstream socket is
//!   watched even when no answer is awaited, so a broker that closes the connection closes the
//!   client's at once (the client reconnects, as to a failed broker). The watch costs no system
//!   call while the socket is quiet: tokio only reads a socket that epoll reported readable.
//! - **Draining** reads no more requests: the answers to the requests already received (local,
//!   or forwarded upstream) are written, then the connection closes. Like Kafka, which reads one
//!   request at a time, nothing read after the request that ended the session is forwarded.
//! - **Delaying** waits before answering a failed authentication (Kafka delays the answer, not
//!   just the close, so a guesser cannot retry sooner).
//! - **Closing** is a lingering close: no FIN sooner than `limits.close_pause_ms` after the last
//!   answer (some clients — kafka-python 2.x — throw away every byte of a read that ends in EOF,
//!   and would resend a Produce that was written), then FIN, then the client's input is read and
//!   discarded until it closes too or [`LINGER`] passes. Closing a socket with unread input makes
//!   the kernel send a reset, which can destroy answers the client has not read yet.
//! - **Gone**: the client closed, or the socket failed; nothing more can be written.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use portcullis::connection::{Action, CloseReason, Connection};
use tokio::io::AsyncWriteExt;
use tokio::time::{sleep_until, timeout, timeout_at, Instant, Sleep};

use super::admission::{Admission, PreAuthReservation, Slot, PRE_AUTH_UNRESERVED_BYTES};
use super::frames::{FrameError, FrameReader, Outgoing, ReadOutcome, BURST_READ, MIN_READ};
use super::listeners::{self, Target};
use super::queue::{Pending, ResponseQueue};
use super::rewrite::{carries_addresses, rewrite, RewriteError};
use super::sockets::{ClientRead, ClientStream, ClientWrite};
use super::upstream::{UpstreamConnection, UpstreamError};
use super::wire::response_correlation_id;
use super::Shared;

/// Requests a client may have outstanding before Portcullis stops reading from it. Clients
/// pipeline up to their `max.in.flight` requests; beyond this the socket's own back-pressure
/// slows them down.
pub const MAX_IN_FLIGHT: usize = 100;

/// How long a closing connection waits for the answers to requests it already forwarded (Kafka's
/// default `request.timeout.ms`).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a closing connection waits for the client to close its side after the FIN.
pub const LINGER: Duration = Duration::from_secs(5);

/// Why a connection ended (logged when it does).
#[derive(Debug)]
enum End {
    /// The client closed its side.
    ClientClosed,
    /// The framework closed it (protocol violation, expired session, revoked credential, …).
    Closed(CloseReason),
    /// An authentication failed; its answer was delayed, then sent.
    AuthenticationFailed,
    /// The client did not authenticate within `limits.authentication_timeout_ms`.
    AuthenticationTimeout,
    /// Nothing happened for `limits.connections_max_idle_ms`.
    Idle,
    /// A frame larger than 8 KiB before authentication, and the pre-authentication buffer budget
    /// is spent.
    PreAuthBudget(usize),
    /// Portcullis is stopping.
    Shutdown,
    /// Something failed.
    Failed(DriverError),
}

/// Why a connection failed.
#[derive(Debug, thiserror::Error)]
enum DriverError {
    #[error("client: {0}")]
    Client(#[from] FrameError),
    #[error("upstream {address}: {source}")]
    Upstream {
        address: String,
        source: UpstreamError,
    },
    #[error("cannot rewrite the upstream's response: {0}")]
    Rewrite(#[from] RewriteError),
    #[error("cannot apply authorization to the upstream's response: {0}")]
    Authorization(String),
    #[error("the authentication step failed: {0}")]
    Step(String),
    #[error("the client read nothing for {0:?}")]
    WriteStalled(Duration),
}

/// Where a connection is in its life; see the module documentation.
#[derive(Debug)]
enum Phase {
    Serving,
    Draining(End),
    Delaying { until: Instant, end: End },
    Closing(End),
    Gone(End),
}

/// Serves one accepted client connection until it closes. `slot` is its admission; it is
/// returned when this ends.
pub(super) async fn serve<S: ClientStream>(
    shared: Arc<Shared>,
    stream: S,
    peer: SocketAddr,
    target: Target,
    tls: bool,
    slot: Slot,
) {
    let (read, write) = stream.into_halves();
    let connection = Connection::new(shared.connection_config.clone(), peer.ip(), tls);
    let now = Instant::now();
    let mut driver = Driver {
        peer,
        tls,
        target,
        connection,
        reader: FrameReader::new(read),
        writer: write,
        out: Outgoing::new(),
        queue: ResponseQueue::new(),
        upstream: None,
        reservation: None,
        accepted_at: now,
        last_activity: now,
        last_write: None,
        shared,
        _slot: slot,
    };
    let end = driver.run().await;
    driver.log_end(&end);
}

struct Driver {
    shared: Arc<Shared>,
    peer: SocketAddr,
    tls: bool,
    target: Target,
    connection: Connection,
    reader: FrameReader<ClientRead>,
    writer: ClientWrite,
    /// Responses being written to the client (one vectored write for all that are ready).
    out: Outgoing,
    queue: ResponseQueue,
    upstream: Option<UpstreamConnection>,
    /// Pre-authentication budget held for the large frame being read.
    reservation: Option<PreAuthReservation>,
    accepted_at: Instant,
    /// When a frame was last read or an answer last written.
    last_activity: Instant,
    /// When an answer was last written, for the pause before the FIN.
    last_write: Option<Instant>,
    _slot: Slot,
}

enum Event {
    Client(Result<Incoming, FrameError>),
    Upstream(Result<Bytes, UpstreamError>),
    Revoked,
    Shutdown,
    Timer,
}

/// What reading the client produced.
enum Incoming {
    Read(ReadOutcome),
    /// A large pre-authentication frame the budget cannot cover (its announced size).
    OverBudget(usize),
}

impl Driver {
    /// Runs the phases until the connection is closed; returns why it ended.
    async fn run(&mut self) -> End {
        let mut phase = Phase::Serving;
        loop {
            phase = match phase {
                Phase::Serving => self.serve_requests().await,
                Phase::Delaying { until, end } => {
                    sleep_until(until).await;
                    Phase::Draining(end)
                }
                Phase::Draining(end) => self.drain(end).await,
                Phase::Closing(end) => {
                    self.close_lingering().await;
                    return end;
                }
                Phase::Gone(end) => return end,
            };
        }
    }

    /// Reads requests and upstream responses until something ends the serving phase.
    async fn serve_requests(&mut self) -> Phase {
        let mut shutdown = self.shared.shutdown.clone();
        if *shutdown.borrow_and_update() {
            return Phase::Closing(End::Shutdown);
        }
        // One timer for the authentication deadline and the idle timeout. It is armed once and
        // re-armed only when it fires early, so requests never touch the timer wheel.
        let timer = tokio::time::sleep_until(self.next_deadline());
        tokio::pin!(timer);
        loop {
            if let Err(e) = self.write_ready().await {
                return Phase::Gone(End::Failed(e));
            }
            let can_read = self.queue.len() < MAX_IN_FLIGHT;
            let max_frame = self.connection.max_frame_size();
            let pre_auth = !self.connection.is_authenticated();
            let ticket = self.connection.ticket();
            let event = tokio::select! {
                // A dropped sender also means the server is gone.
                _ = shutdown.changed() => Event::Shutdown,
                // The session's credential was removed or changed: close at once, even if idle.
                () = revoked(ticket.as_ref()) => Event::Revoked,
                // Always watched: an answer, or the upstream closing or failing.
                response = next_response(&mut self.upstream) => Event::Upstream(response),
                read = read_request(
                    &mut self.reader,
                    max_frame,
                    pre_auth,
                    &self.shared.admission,
                    &mut self.reservation,
                ), if can_read => Event::Client(read),
                () = &mut timer => Event::Timer,
            };
            let next = match event {
                Event::Shutdown => Some(if pre_auth {
                    Phase::Closing(End::Shutdown)
                } else {
                    Phase::Draining(End::Shutdown)
                }),
                Event::Revoked => {
                    self.shared
                        .connection_config
                        .metrics
                        .revoked_connections_closed();
                    Some(Phase::Closing(End::Closed(CloseReason::CredentialRevoked)))
                }
                Event::Timer => self.on_timer(timer.as_mut()),
                Event::Client(Err(e)) => Some(Phase::Gone(End::Failed(e.into()))),
                Event::Client(Ok(incoming)) => {
                    self.last_activity = Instant::now();
                    let mut next = self.on_client(incoming).await;
                    // The frame is handled: its part of the pre-authentication budget goes back.
                    self.reservation = None;
                    // Every other frame the read brought in is handled too before anything is
                    // sent upstream, so one write carries them all.
                    while next.is_none()
                        && self.connection.is_authenticated()
                        && self.queue.len() < MAX_IN_FLIGHT
                    {
                        match self.reader.buffered_frame(self.connection.max_frame_size()) {
                            Ok(Some(outcome)) => {
                                next = self.on_client(Incoming::Read(outcome)).await;
                            }
                            Ok(None) => break,
                            Err(e) => next = Some(Phase::Gone(End::Failed(e.into()))),
                        }
                    }
                    // Also when leaving: a drain waits for the answers to what was forwarded.
                    match self.flush_upstream().await {
                        Err(e) if next.is_none() => Some(Phase::Closing(End::Failed(e))),
                        _ => next,
                    }
                }
                Event::Upstream(response) => {
                    let handled = response
                        .map_err(|source| self.upstream_error(source))
                        .and_then(|response| self.on_upstream_response(response));
                    handled.err().map(|e| Phase::Closing(End::Failed(e)))
                }
            };
            if let Some(next) = next {
                return next;
            }
        }
    }

    async fn on_client(&mut self, incoming: Incoming) -> Option<Phase> {
        let actions = match incoming {
            Incoming::Read(ReadOutcome::Frame(frame)) => {
                if self.connection.next_step_may_block() {
                    match self.step_off_runtime(frame).await {
                        Ok(actions) => actions,
                        Err(e) => return Some(Phase::Closing(End::Failed(e))),
                    }
                } else {
                    self.connection.handle_frame(frame, now_ms())
                }
            }
            Incoming::Read(ReadOutcome::TooLarge(size)) => self.connection.frame_too_large(size),
            Incoming::Read(ReadOutcome::Closed) => return Some(Phase::Gone(End::ClientClosed)),
            Incoming::OverBudget(size) => return Some(Phase::Closing(End::PreAuthBudget(size))),
        };
        self.apply(actions).await
    }

    /// Runs a SASL step on the bounded pool of authentication workers: a step may derive a key
    /// (PLAIN checks a password with PBKDF2) or be a plugin's, and must not hold up the async
    /// workers that serve every other connection. Mechanisms whose steps are cheap (SCRAM) run
    /// inline, so they never queue behind a storm of expensive ones.
    async fn step_off_runtime(&mut self, frame: Bytes) -> Result<Vec<Action>, DriverError> {
        // Requests already forwarded do not wait for the step.
        self.flush_upstream().await?;
        let permit = Arc::clone(&self.shared.sasl_workers)
            .acquire_owned()
            .await
            .map_err(|e| DriverError::Step(e.to_string()))?;
        // The connection travels to the worker and back; a fresh one stands in meanwhile.
        let stand_in = Connection::new(
            self.shared.connection_config.clone(),
            self.peer.ip(),
            self.tls,
        );
        let mut connection = std::mem::replace(&mut self.connection, stand_in);
        let (connection, actions) = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let actions = connection.handle_frame(frame, now_ms());
            (connection, actions)
        })
        .await
        .map_err(|e| DriverError::Step(e.to_string()))?;
        self.connection = connection;
        Ok(actions)
    }

    /// The timer fired: the authentication deadline, or possibly the idle timeout.
    fn on_timer(&mut self, timer: Pin<&mut Sleep>) -> Option<Phase> {
        let limits = &self.shared.limits;
        let now = Instant::now();
        if !self.connection.is_authenticated() {
            if now >= self.accepted_at + limits.authentication_timeout {
                return Some(Phase::Closing(End::AuthenticationTimeout));
            }
        } else if self.queue.is_empty() && now >= self.last_activity + limits.idle_timeout {
            return Some(Phase::Closing(End::Idle));
        }
        timer.reset(self.next_deadline().max(now + Duration::from_millis(10)));
        None
    }

    /// When the timer must look again: the authentication deadline until the client has
    /// authenticated, then the idle deadline (from the last activity, or from now while answers
    /// are outstanding).
    fn next_deadline(&self) -> Instant {
        let limits = &self.shared.limits;
        if !self.connection.is_authenticated() {
            self.accepted_at + limits.authentication_timeout
        } else if self.queue.is_empty() {
            self.last_activity + limits.idle_timeout
        } else {
            Instant::now() + limits.idle_timeout
        }
    }

    /// Carries out the framework's actions for one frame, in order. `Some` ends serving.
    /// Forwarded frames are queued; the caller flushes them once per batch of frames.
    async fn apply(&mut self, actions: Vec<Action>) -> Option<Phase> {
        for action in actions {
            match action {
                Action::Respond(frame) => self.queue.push_ready(frame),
                Action::Forward(request) => {
                    if let Err(e) = self.forward(request.frame).await {
                        return Some(Phase::Closing(End::Failed(e)));
                    }
                    if request.expects_response {
                        self.queue.push_pending(Pending {
                            plan: request.plan,
                            api_key: request.api_key,
                            api_version: request.api_version,
                            correlation_id: request.correlation_id,
                        });
                    }
                }
                Action::Persist(persist) => {
                    if let Some(end) = self.carry_out_persist(persist).await {
                        return Some(Phase::Closing(end));
                    }
                }
                Action::CloseAfter(delay) => {
                    return Some(Phase::Delaying {
                        until: Instant::now() + delay,
                        end: End::AuthenticationFailed,
                    })
                }
                Action::Close(reason) => return Some(Phase::Closing(End::Closed(reason))),
                Action::CloseAfterInFlight(reason) => {
                    return Some(Phase::Draining(End::Closed(reason)))
                }
            }
        }
        None
    }

    /// Sends every frame queued for the upstream.
    async fn flush_upstream(&mut self) -> Result<(), DriverError> {
        let Some(upstream) = self.upstream.as_mut() else {
            return Ok(());
        };
        match upstream.flush().await {
            Ok(()) => Ok(()),
            Err(source) => Err(self.upstream_error(source)),
        }
    }

    /// Queues one client frame for the upstream (sent by [`Driver::flush_upstream`]).
    async fn forward(&mut self, frame: Bytes) -> Result<(), DriverError> {
        let upstream = self.upstream().await?;
        if let Err(source) = upstream.reauthenticate_if_due().await {
            return Err(self.upstream_error(source));
        }
        let Some(upstream) = self.upstream.as_mut() else {
            return Err(self.upstream_error(UpstreamError::Closed));
        };
        if let Err(source) = upstream.send(frame) {
            return Err(self.upstream_error(source));
        }
        Ok(())
    }

    /// The connection's upstream, opened on the first forwarded request.
    async fn upstream(&mut self) -> Result<&mut UpstreamConnection, DriverError> {
        if self.upstream.is_none() {
            let settings = &self.shared.upstream;
            let opened = match self.target {
                Target::Bootstrap => {
                    UpstreamConnection::open_any(&settings.bootstrap_servers, settings).await
                }
                Target::Broker(node_id) => match self.shared.brokers.address(node_id) {
                    Some(address) => UpstreamConnection::open(&address, settings, None)
                        .await
                        .map(|(c, _)| c),
                    None => Err(UpstreamError::NoAddress(format!("broker {node_id}"))),
                },
            };
            let connection = opened.map_err(|source| DriverError::Upstream {
                address: self.target_name(),
                source,
            })?;
            tracing::debug!(target = ?self.target, upstream = connection.address(), "upstream connected");
            self.upstream = Some(connection);
        }
        let name = self.target_name();
        self.upstream.as_mut().ok_or(DriverError::Upstream {
            address: name,
            source: UpstreamError::Closed,
        })
    }

    /// Matches an upstream response to the oldest forwarded request and rewrites its addresses.
    fn on_upstream_response(&mut self, response: Bytes) -> Result<(), DriverError> {
        let got = response_correlation_id(&response).unwrap_or(-1);
        let Some(pending) = self.queue.oldest_pending().cloned() else {
            return Err(self.upstream_error(UpstreamError::OutOfOrder { expected: -1, got }));
        };
        if got != pending.correlation_id {
            return Err(self.upstream_error(UpstreamError::OutOfOrder {
                expected: pending.correlation_id,
                got,
            }));
        }
        // Authorization first (filter what this principal may not see, merge the locally denied
        // entries back in), then the broker addresses.
        let response = if pending.plan.is_unchanged() {
            response
        } else {
            let applied = pending
                .plan
                .apply(response)
                .map_err(|e| DriverError::Authorization(e.to_string()))?;
            applied.frame
        };
        let response = if carries_addresses(pending.api_key) {
            let shared = &self.shared;
            let rewritten = rewrite(
                pending.api_key,
                pending.api_version,
                response,
                &shared.advertised,
                &shared.brokers,
            )?;
            // Open the broker ports before the client can learn them from this response.
            for node_id in rewritten.node_ids {
                listeners::ensure_broker_listener(shared, node_id);
            }
            rewritten.frame
        } else {
            response
        };
        self.queue.complete_oldest(response);
        Ok(())
    }

    /// Writes the answers to every request already received (waiting for the upstream's), then
    /// moves on to closing. No client frame is read. Bounded by [`DRAIN_TIMEOUT`], so a silent
    /// upstream cannot hold the connection open.
    async fn drain(&mut self, end: End) -> Phase {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            if let Err(e) = self.write_ready().await {
                return Phase::Gone(End::Failed(e));
            }
            if !self.queue.has_pending() {
                return Phase::Closing(end);
            }
            let response = match timeout_at(deadline, next_response(&mut self.upstream)).await {
                Ok(response) => response,
                Err(_) => {
                    tracing::debug!(peer = %self.peer, target = ?self.target, "gave up waiting for in-flight responses before closing");
                    return Phase::Closing(end);
                }
            };
            let handled = response
                .map_err(|source| self.upstream_error(source))
                .and_then(|response| self.on_upstream_response(response));
            if let Err(e) = handled {
                tracing::debug!(peer = %self.peer, error = %e, "while answering in-flight requests before closing");
                return Phase::Closing(end);
            }
        }
    }

    /// The lingering close: pause after the last answer (discarding input), FIN, then discard
    /// input until the client closes or [`LINGER`] passes. Never leaves unread input behind when
    /// the client cooperates, so the kernel has no reason to send a reset.
    async fn close_lingering(&mut self) {
        let mut client_closed = false;
        if let Some(last_write) = self.last_write {
            // Long enough for the client to read the answers in a read of their own.
            let pause_end = last_write + self.shared.limits.close_pause;
            if let Ok(read) = timeout_at(pause_end, self.reader.discard_until_eof()).await {
                // EOF (or a failed socket): nothing more will arrive.
                client_closed = true;
                if read.is_err() {
                    return;
                }
            }
        }
        // The FIN (after TLS's close_notify). Bounded: a client that reads nothing cannot hold
        // the connection open through a full send buffer.
        match timeout(LINGER, self.writer.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
        if !client_closed {
            let _ = timeout(LINGER, self.reader.discard_until_eof()).await;
        }
    }

    /// Writes every response at the head of the queue that is ready. A client that reads
    /// nothing for `connections_max_idle_ms` is given up.
    async fn write_ready(&mut self) -> Result<(), DriverError> {
        if !self.queue.head_is_ready() {
            return Ok(());
        }
        let stall = self.shared.limits.idle_timeout;
        while let Some(frame) = self.queue.pop_ready() {
            self.out.push_frame(frame)?;
        }
        timeout(stall, self.out.write_to(&mut self.writer))
            .await
            .map_err(|_| DriverError::WriteStalled(stall))?
            .map_err(FrameError::Io)?;
        let now = Instant::now();
        self.last_write = Some(now);
        self.last_activity = now;
        Ok(())
    }

    fn upstream_error(&self, source: UpstreamError) -> DriverError {
        let address = match &self.upstream {
            Some(upstream) => upstream.address().to_owned(),
            None => self.target_name(),
        };
        DriverError::Upstream { address, source }
    }

    fn target_name(&self) -> String {
        match self.target {
            Target::Bootstrap => "bootstrap".to_owned(),
            Target::Broker(node_id) => format!("broker {node_id}"),
        }
    }

    fn log_end(&self, end: &End) {
        let (peer, target) = (self.peer, self.target);
        match end {
            End::Closed(reason) => {
                tracing::debug!(%peer, ?target, ?reason, "connection closed by the security layer")
            }
            End::Failed(
                e @ (DriverError::Upstream { .. }
                | DriverError::Rewrite(_)
                | DriverError::Authorization(_)
                | DriverError::Step(_)),
            ) => tracing::warn!(%peer, ?target, error = %e, "closing client connection"),
            End::Failed(e) => tracing::debug!(%peer, ?target, error = %e, "connection closed"),
            End::PreAuthBudget(size) => tracing::info!(
                %peer,
                ?target,
                frame_bytes = size,
                "connection closed by a limit: the pre-authentication buffer budget \
                 (limits.max_pre_auth_buffer_bytes) cannot hold its frame"
            ),
            End::AuthenticationTimeout | End::Idle => {
                tracing::info!(%peer, ?target, reason = ?end, "connection closed by a limit")
            }
            other => tracing::debug!(%peer, ?target, end = ?other, "connection closed"),
        }
    }
}

/// Reads the next client frame. Before authentication a frame over
/// [`PRE_AUTH_UNRESERVED_BYTES`] is read only once its size is reserved from the node's
/// pre-authentication budget (kept in `reservation` until the frame is handled). Cancel-safe: the
/// reader keeps what it read, and a reservation made before a cancellation stays held.
async fn read_request<R: super::frames::ReadSource>(
    reader: &mut FrameReader<R>,
    max_frame: usize,
    pre_auth: bool,
    admission: &Arc<Admission>,
    reservation: &mut Option<PreAuthReservation>,
) -> Result<Incoming, FrameError> {
    // Before authentication reads stay small: an unauthenticated connection holds its buffer.
    let burst = if pre_auth { MIN_READ } else { BURST_READ };
    if !pre_auth || max_frame <= PRE_AUTH_UNRESERVED_BYTES || reservation.is_some() {
        return reader
            .next_frame(max_frame, burst)
            .await
            .map(Incoming::Read);
    }
    match reader.next_frame(PRE_AUTH_UNRESERVED_BYTES, burst).await? {
        ReadOutcome::TooLarge(size) if size <= max_frame => {
            match admission.reserve_pre_auth(size) {
                Some(reserved) => {
                    *reservation = Some(reserved);
                    reader
                        .next_frame(max_frame, burst)
                        .await
                        .map(Incoming::Read)
                }
                None => Ok(Incoming::OverBudget(size)),
            }
        }
        other => Ok(Incoming::Read(other)),
    }
}

// ---- Local writes: the Persist effect (delegation tokens, ACLs, SCRAM credentials) ----------

impl Driver {
    /// Appends a local handler's records through the store writer, off the request path, and
    /// queues the answer its continuation builds in this request's place. The connection reads
    /// nothing more meanwhile (Kafka answers one request of a connection at a time); other
    /// connections are served by other tasks.
    async fn carry_out_persist(&mut self, persist: portcullis::local::Persist) -> Option<End> {
        // Requests already forwarded do not wait for the store.
        if let Err(e) = self.flush_upstream().await {
            return Some(End::Failed(e));
        }
        match super::persist::run(self.shared.store_writer.as_ref(), persist).await {
            super::persist::Finished::Respond(frame) => {
                self.queue.push_ready(frame);
                None
            }
            super::persist::Finished::Close(reason) => {
                Some(End::Closed(CloseReason::InvalidRequest(reason)))
            }
        }
    }
}

/// Completes when the session's credential is revoked; never without a session.
async fn revoked(ticket: Option<&Arc<portcullis::reauth::SessionTicket>>) {
    match ticket {
        Some(ticket) => ticket.revoked().await,
        None => std::future::pending().await,
    }
}

/// The next upstream response, or never if there is no upstream connection yet.
async fn next_response(upstream: &mut Option<UpstreamConnection>) -> Result<Bytes, UpstreamError> {
    match upstream {
        Some(connection) => connection.next_response().await,
        None => std::future::pending().await,
    }
}

/// Milliseconds since the epoch, for the framework's clock-free state machine.
fn now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
