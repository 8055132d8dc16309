//! One client connection, in two halves that run side by side so that neither direction waits
//! for the other: the **request side** (this module: the client's read half, the framework's
//! [`Connection`], the upstream's write half) and the **response side** ([`super::responses`], its
//! own task: the upstream's read half, the client's write half). The connection's
//! [`ResponseQueue`] joins them: one entry per request that gets an answer, in request order, and
//! its capacity bounds the requests outstanding.
//!
//! ```text
//! client ──► FrameReader ─► Connection::handle_frame ─► Respond ──────────► queue: ready ──┐
//!                                                    └► Forward ─► upstream   queue: awaited │
//!                                                                     │                     ▼
//! client ◄──────────────────── response side (relays or rewrites) ◄──┴── upstream responses
//! ```
//!
//! A connection goes through explicit phases ([`Phase`]), decided here:
//!
//! ```text
//! Serving ──(session expired, server stopping)──► Draining ──► Closing
//!    │    ──(failed authentication)─► Delaying ──► Draining ──► Closing
//!    │    ──(protocol violation, revoked, idle, upstream gone, …)──────► Closing
//!    └────(client closed, socket error)─────────────────────────────────► Gone
//! ```
//!
//! - **Serving** reads requests. The response side watches the upstream socket even when no
//!   answer is awaited, so a broker that closes the connection ends the response side, and this
//!   side closes the client's connection at once (the client reconnects, as to a failed broker).
//! - **Draining** reads no more requests: the response side writes the answers to the requests
//!   already received (local, or forwarded upstream) up to the queue's end marker, then the
//!   connection closes. Like Kafka, which reads one request at a time, nothing read after the
//!   request that ended the session is forwarded.
//! - **Delaying** waits before answering a failed authentication: the answer is queued only after
//!   the delay (Kafka delays the answer, not just the close, so a guesser cannot retry sooner).
//! - **Closing** stops the response side where it is and makes a lingering close: no FIN sooner
//!   than `limits.close_pause_ms` after the last answer (some clients — kafka-python 2.x — throw
//!   away every byte of a read that ends in EOF, and would resend a Produce that was written),
//!   then FIN, then the client's input is read and discarded until it closes too or [`LINGER`]
//!   passes. Closing a socket with unread input makes the kernel send a reset, which can destroy
//!   answers the client has not read yet.
//! - **Gone**: the client closed, or the socket failed; nothing more can be written.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use portcullis::connection::{Action, CloseReason, Connection};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant, Sleep};

use super::admission::{PreAuthReservation, Slot};
use super::brokers::Target;
use super::client_reads::{read_request, Incoming};
use super::driver_error::{DriverError, ResponseSideFailure};
use super::frames::{FrameError, FrameReader, ReadOutcome};
use super::live::{Live, LiveSource};
use super::queue::ResponseQueue;
use super::responses::{Ended, Finished, ResponseSide};
use super::sockets::{ClientRead, ClientStream};
use super::upstream::UpstreamSender;
use super::Shared;

/// Requests a client may have outstanding before Portcullis stops reading from it. Clients
/// pipeline up to their `max.in.flight` requests; beyond this the socket's own back-pressure
/// slows them down.
pub const MAX_IN_FLIGHT: usize = 100;

/// How long a closing connection waits for the answers to requests it already forwarded (Kafka's
/// default `request.timeout.ms`).
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a closing connection waits for the client to close its side after the FIN.
pub const LINGER: Duration = Duration::from_secs(5);

/// Why a connection ended (logged when it does).
#[derive(Debug)]
pub(super) enum End {
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

/// Where a connection is in its life; see the module documentation.
#[derive(Debug)]
pub(super) enum Phase {
    Serving,
    Draining(End),
    /// The failed authentication's answer (`held`) is queued at `until`.
    Delaying {
        until: Instant,
        end: End,
        held: Vec<Bytes>,
    },
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
    tls: Option<portcullis::principal::TlsPeer>,
    slot: Slot,
    live: Arc<Live>,
) {
    let (read, write) = stream.into_halves();
    let is_tls = tls.is_some();
    let mut connection = Connection::new(Arc::clone(&live.connection_config), peer.ip(), is_tls)
        .with_config_source(Arc::new(LiveSource(Arc::clone(&shared.live))));
    if let Some(tls_peer) = tls {
        connection = connection.with_tls_peer(Arc::new(tls_peer));
    }
    let queue = Arc::new(ResponseQueue::new(MAX_IN_FLIGHT));
    let responses = tokio::spawn(
        ResponseSide::new(
            Arc::clone(&shared),
            live.limits.idle_timeout,
            Arc::clone(&queue),
            write,
        )
        .run(),
    );
    let now = Instant::now();
    let mut driver = Driver {
        peer,
        tls: is_tls,
        target,
        connection,
        reader: FrameReader::new(read),
        queue,
        responses: ResponseTask::Running(responses),
        upstream: None,
        upstream_lease: None,
        admitted_settings: None,
        upstream_identity: None,
        reservation: None,
        accepted_at: now,
        last_read: now,
        request_span: tracing::Span::none(),
        shared,
        live,
        _slot: slot,
    };
    let span = crate::telemetry::traces::connection_span(
        peer,
        &driver.live.connection_config.listener,
        &driver.target_name(),
        is_tls,
    );
    let end = tracing::Instrument::instrument(driver.run(), span).await;
    driver.log_end(&end);
}

/// The response side's task, or what it handed back when it ended.
pub(super) enum ResponseTask {
    Running(JoinHandle<Finished>),
    Ended(Finished),
    /// Its end was consumed (the client's write half is dropped).
    Gone,
}

/// The request side of one connection (see the module documentation).
pub(super) struct Driver {
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
    pub(super) tls: bool,
    pub(super) target: Target,
    pub(super) connection: Connection,
    pub(super) reader: FrameReader<ClientRead>,
    pub(super) queue: Arc<ResponseQueue>,
    pub(super) responses: ResponseTask,
    pub(super) upstream: Option<UpstreamSender>,
    /// With the `delegated` policy: the lease on the principal's upstream token.
    pub(super) upstream_lease: Option<super::delegated_hook::Lease>,
    /// With the `delegated` policy: the settings (the principal's token login) obtained when the
    /// session was admitted, for its upstream connection.
    pub(super) admitted_settings: Option<super::upstream::UpstreamSettings>,
    /// Who the open upstream connection authenticated as; every request sent on it must have
    /// been routed with this identity.
    pub(super) upstream_identity: Option<portcullis::forwarding::UpstreamIdentity>,
    /// Pre-authentication budget held for the large frame being read.
    pub(super) reservation: Option<PreAuthReservation>,
    pub(super) accepted_at: Instant,
    /// When a frame was last read.
    pub(super) last_read: Instant,
    /// The trace span of the request being handled (telemetry; disabled without export).
    pub(super) request_span: tracing::Span,
    /// The listener's configuration when this connection was accepted (its time limits).
    pub(super) live: Arc<Live>,
    pub(super) _slot: Slot,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Whatever ended this side (even a cancellation) ends the response side too.
        if let ResponseTask::Running(handle) = &self.responses {
            handle.abort();
        }
    }
}

enum Event {
    Client(Result<Incoming, FrameError>),
    ResponsesEnded(Result<Finished, tokio::task::JoinError>),
    Room,
    Revoked,
    Shutdown,
    Timer,
}

impl Driver {
    /// Runs the phases until the connection is closed; returns why it ended.
    async fn run(&mut self) -> End {
        let mut phase = Phase::Serving;
        loop {
            phase = match phase {
                Phase::Serving => self.serve_requests().await,
                Phase::Delaying { until, end, held } => {
                    sleep_until(until).await;
                    for frame in held {
                        self.queue.push_ready(frame);
                    }
                    Phase::Draining(end)
                }
                Phase::Draining(end) => Box::pin(self.drain(end)).await,
                Phase::Closing(end) => {
                    Box::pin(self.close_lingering()).await;
                    return end;
                }
                Phase::Gone(end) => return end,
            };
        }
    }

    /// Reads requests until something ends the serving phase.
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
            let can_read = self.queue.has_room();
            let max_frame = self.connection.max_frame_size();
            let pre_auth = !self.connection.is_authenticated();
            let ticket = self.connection.ticket();
            let ResponseTask::Running(responses) = &mut self.responses else {
                return Phase::Closing(End::Failed(DriverError::ResponseSide(
                    ResponseSideFailure::EndedBeforeServing,
                )));
            };
            let event = tokio::select! {
                // A dropped sender also means the server is gone.
                _ = shutdown.changed() => Event::Shutdown,
                // The session's credential was removed or changed: close at once, even if idle.
                () = revoked(ticket.as_ref()) => Event::Revoked,
                // The upstream closed or failed, or the client cannot be written to.
                finished = responses => Event::ResponsesEnded(finished),
                read = read_request(
                    &mut self.reader,
                    max_frame,
                    pre_auth,
                    &self.shared.admission,
                    &mut self.reservation,
                ), if can_read => Event::Client(read),
                // The queue was full: an answer made room.
                () = self.queue.room(), if !can_read => Event::Room,
                () = &mut timer => Event::Timer,
            };
            let next = match event {
                Event::Shutdown => Some(if pre_auth {
                    Phase::Closing(End::Shutdown)
                } else {
                    Phase::Draining(End::Shutdown)
                }),
                Event::Revoked => {
                    self.connection
                        .config()
                        .services
                        .metrics
                        .revoked_connections_closed();
                    Some(Phase::Closing(End::Closed(CloseReason::CredentialRevoked)))
                }
                Event::ResponsesEnded(finished) => Some(self.responses_ended(finished)),
                Event::Room => None,
                Event::Timer => self.on_timer(timer.as_mut()),
                Event::Client(Err(e)) => Some(Phase::Gone(End::Failed(e.into()))),
                Event::Client(Ok(incoming)) => {
                    self.last_read = Instant::now();
                    let mut next = self.on_client(incoming).await;
                    // The frame is handled: its part of the pre-authentication budget goes back.
                    self.reservation = None;
                    // Every other frame the read brought in is handled too before anything is
                    // sent upstream, so one write carries them all.
                    while next.is_none()
                        && self.connection.is_authenticated()
                        && self.queue.has_room()
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
            };
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// The response side ended while requests were being served.
    fn responses_ended(&mut self, finished: Result<Finished, tokio::task::JoinError>) -> Phase {
        let finished = match finished {
            Ok(finished) => finished,
            Err(e) => {
                self.responses = ResponseTask::Gone;
                return Phase::Gone(End::Failed(DriverError::ResponseSide(e.into())));
            }
        };
        let (phase, finished) = match finished {
            Finished {
                ended: Ended::Upstream(e),
                client,
            } => (
                Phase::Closing(End::Failed(e)),
                Finished {
                    ended: Ended::Stopped,
                    client,
                },
            ),
            Finished {
                ended: Ended::Client(e),
                client,
            } => (
                Phase::Gone(End::Failed(e)),
                Finished {
                    ended: Ended::Stopped,
                    client,
                },
            ),
            other => (
                Phase::Closing(End::Failed(DriverError::ResponseSide(
                    ResponseSideFailure::Finished(other.ended.name()),
                ))),
                other,
            ),
        };
        self.responses = ResponseTask::Ended(finished);
        phase
    }

    async fn on_client(&mut self, incoming: Incoming) -> Option<Phase> {
        let authenticated_before = self.connection.is_authenticated();
        let actions = match incoming {
            Incoming::Read(ReadOutcome::Frame(frame)) => {
                self.request_span = crate::telemetry::traces::request_span(&frame);
                if self.connection.next_step_may_block() {
                    // Boxed, like every path a connection takes once or rarely (SASL steps,
                    // admission, persisting, opening the upstream, closing): the task is sized
                    // for its largest state, for its whole life, so those live on the heap only
                    // while they run and an idle connection stays small.
                    match Box::pin(self.step_off_runtime(frame)).await {
                        Ok(actions) => actions,
                        Err(e) => return Some(Phase::Closing(End::Failed(e))),
                    }
                } else {
                    let span = self.request_span.clone();
                    span.in_scope(|| self.connection.handle_frame(frame, now_ms()))
                }
            }
            Incoming::Read(ReadOutcome::TooLarge(size)) => self.connection.frame_too_large(size),
            Incoming::Read(ReadOutcome::Closed) => return Some(Phase::Gone(End::ClientClosed)),
            Incoming::OverBudget(size) => return Some(Phase::Closing(End::PreAuthBudget(size))),
        };
        crate::telemetry::traces::record_decision(
            &self.request_span,
            &self.connection,
            &actions,
            !authenticated_before && self.connection.is_authenticated(),
        );
        let phase = self.apply(actions).await;
        self.request_span = tracing::Span::none();
        phase
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
            .map_err(|e| DriverError::Step(e.into()))?;
        // The connection travels to the worker and back; a fresh one stands in meanwhile.
        let stand_in = Connection::new(
            Arc::clone(self.connection.config()),
            self.peer.ip(),
            self.tls,
        );
        let mut connection = std::mem::replace(&mut self.connection, stand_in);
        let span = self.request_span.clone();
        let (connection, actions) = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let actions = span.in_scope(|| connection.handle_frame(frame, now_ms()));
            (connection, actions)
        })
        .await
        .map_err(|e| DriverError::Step(e.into()))?;
        self.connection = connection;
        Ok(actions)
    }

    /// The timer fired: the authentication deadline, or possibly the idle timeout.
    fn on_timer(&mut self, timer: Pin<&mut Sleep>) -> Option<Phase> {
        let limits = &self.live.limits;
        let now = Instant::now();
        if !self.connection.is_authenticated() {
            if now >= self.accepted_at + limits.authentication_timeout {
                return Some(Phase::Closing(End::AuthenticationTimeout));
            }
        } else if self.queue.is_empty() && now >= self.last_activity() + limits.idle_timeout {
            return Some(Phase::Closing(End::Idle));
        }
        timer.reset(self.next_deadline().max(now + Duration::from_millis(10)));
        None
    }

    /// When a frame was last read or an answer last written.
    fn last_activity(&self) -> Instant {
        match self.queue.last_write() {
            Some(written) => written.max(self.last_read),
            None => self.last_read,
        }
    }

    /// When the timer must look again: the authentication deadline until the client has
    /// authenticated, then the idle deadline (from the last activity, or from now while answers
    /// are outstanding).
    fn next_deadline(&self) -> Instant {
        let limits = &self.live.limits;
        if !self.connection.is_authenticated() {
            self.accepted_at + limits.authentication_timeout
        } else if self.queue.is_empty() {
            self.last_activity() + limits.idle_timeout
        } else {
            Instant::now() + limits.idle_timeout
        }
    }

    /// Carries out the framework's actions for one frame, in order. `Some` ends serving.
    /// Forwarded frames are queued; the caller flushes them once per batch of frames.
    async fn apply(&mut self, actions: Vec<Action>) -> Option<Phase> {
        // A failed authentication's answer is held back until its delay has passed.
        let mut delayed = actions.iter().any(|a| matches!(a, Action::CloseAfter(_)));
        let mut held = Vec::new();
        let mut actions = std::collections::VecDeque::from(actions);
        while let Some(action) = actions.pop_front() {
            match action {
                Action::Admit(principal) => {
                    // The verdict's actions (the answer to the client, maybe a close) come next.
                    let verdict = Box::pin(self.admit(&principal)).await;
                    let follow = self.connection.admitted(verdict);
                    delayed |= follow.iter().any(|a| matches!(a, Action::CloseAfter(_)));
                    for follow in follow.into_iter().rev() {
                        actions.push_front(follow);
                    }
                }
                Action::Respond(frame) if delayed => held.push(frame),
                Action::Respond(frame) => self.queue.push_ready(frame),
                Action::Forward(request) => {
                    if let Err(e) = self.forward(request).await {
                        return Some(Phase::Closing(End::Failed(e)));
                    }
                }
                Action::Persist(persist) => {
                    if let Some(end) = Box::pin(self.carry_out_persist(persist)).await {
                        return Some(Phase::Closing(end));
                    }
                }
                Action::CloseAfter(delay) => {
                    return Some(Phase::Delaying {
                        until: Instant::now() + delay,
                        end: End::AuthenticationFailed,
                        held,
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

    pub(super) fn target_name(&self) -> String {
        match self.target {
            Target::Bootstrap => "bootstrap".to_owned(),
            Target::Broker(node_id) => format!("broker {node_id}"),
        }
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
        match super::persist::run(&self.shared.store_writer, persist).await {
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

/// Milliseconds since the epoch, for the framework's clock-free state machine.
fn now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
