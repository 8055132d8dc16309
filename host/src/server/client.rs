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
use portcullis::connection::{Action, CloseReason, Connection, Forwarded, LogLevel};
use portcullis::forwarding::UpstreamIdentity;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, timeout_at, Instant, Sleep};

use super::admission::{Admission, PreAuthReservation, Slot, PRE_AUTH_UNRESERVED_BYTES};
use super::brokers::Target;
use super::frames::{FrameError, FrameReader, ReadOutcome, ReadSource, BURST_READ, MIN_READ};
use super::queue::{Pending, ResponseQueue};
use super::responses::{Ended, Finished, ResponseSide};
use super::rewrite::RewriteError;
use super::sockets::{ClientRead, ClientStream};
use super::upstream::{UpstreamConnection, UpstreamError, UpstreamSender};
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
pub(super) enum DriverError {
    #[error("client: {0}")]
    Client(#[from] FrameError),
    #[error("upstream {address}: {source}")]
    Upstream {
        address: String,
        source: UpstreamError,
    },
    #[error("{0}")]
    Delegated(#[from] super::delegated::DelegatedError),
    #[error("cannot rewrite the upstream's response: {0}")]
    Rewrite(#[from] RewriteError),
    #[error("cannot apply authorization to the upstream's response: {0}")]
    Authorization(String),
    #[error("the authentication step failed: {0}")]
    Step(String),
    #[error("the client read nothing for {0:?}")]
    WriteStalled(Duration),
    #[error("the response side ended unexpectedly: {0}")]
    ResponseSide(String),
    /// The forwarding policy routed a request with another identity than the one the
    /// connection's upstream was opened with: sending it would give it the wrong rights.
    #[error("the forwarding policy switched the upstream identity of a connection from {opened:?} to {requested:?}; a policy must route one session's requests with one identity")]
    IdentitySwitched {
        opened: portcullis::forwarding::UpstreamIdentity,
        requested: portcullis::forwarding::UpstreamIdentity,
    },
}

/// Where a connection is in its life; see the module documentation.
#[derive(Debug)]
enum Phase {
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
) {
    let (read, write) = stream.into_halves();
    let is_tls = tls.is_some();
    let mut connection = Connection::new(shared.connection_config.clone(), peer.ip(), is_tls);
    if let Some(tls_peer) = tls {
        connection = connection.with_tls_peer(Arc::new(tls_peer));
    }
    let queue = Arc::new(ResponseQueue::new(MAX_IN_FLIGHT));
    let responses =
        tokio::spawn(ResponseSide::new(Arc::clone(&shared), Arc::clone(&queue), write).run());
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
        _slot: slot,
    };
    let span = crate::telemetry::traces::connection_span(
        peer,
        &driver.shared.connection_config.listener,
        &driver.target_name(),
        is_tls,
    );
    let end = tracing::Instrument::instrument(driver.run(), span).await;
    driver.log_end(&end);
}

/// The response side's task, or what it handed back when it ended.
enum ResponseTask {
    Running(JoinHandle<Finished>),
    Ended(Finished),
    /// Its end was consumed (the client's write half is dropped).
    Gone,
}

/// The request side of one connection (see the module documentation).
struct Driver {
    shared: Arc<Shared>,
    peer: SocketAddr,
    tls: bool,
    target: Target,
    connection: Connection,
    reader: FrameReader<ClientRead>,
    queue: Arc<ResponseQueue>,
    responses: ResponseTask,
    upstream: Option<UpstreamSender>,
    /// With the `delegated` policy: the lease on the principal's upstream token.
    upstream_lease: Option<super::delegated::Lease>,
    /// With the `delegated` policy: the settings (the principal's token login) obtained when the
    /// session was admitted, for its upstream connection.
    admitted_settings: Option<super::upstream::UpstreamSettings>,
    /// Who the open upstream connection authenticated as; every request sent on it must have
    /// been routed with this identity.
    upstream_identity: Option<portcullis::forwarding::UpstreamIdentity>,
    /// Pre-authentication budget held for the large frame being read.
    reservation: Option<PreAuthReservation>,
    accepted_at: Instant,
    /// When a frame was last read.
    last_read: Instant,
    /// The trace span of the request being handled (telemetry; disabled without export).
    request_span: tracing::Span,
    _slot: Slot,
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
                Phase::Delaying { until, end, held } => {
                    sleep_until(until).await;
                    for frame in held {
                        self.queue.push_ready(frame);
                    }
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
                    "ended before serving did".to_owned(),
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
                    self.shared
                        .connection_config
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
                return Phase::Gone(End::Failed(DriverError::ResponseSide(e.to_string())));
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
                Phase::Closing(End::Failed(DriverError::ResponseSide(format!(
                    "{:?}",
                    other.ended
                )))),
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
                    match self.step_off_runtime(frame).await {
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
            .map_err(|e| DriverError::Step(e.to_string()))?;
        // The connection travels to the worker and back; a fresh one stands in meanwhile.
        let stand_in = Connection::new(
            self.shared.connection_config.clone(),
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
        let limits = &self.shared.limits;
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
                    let verdict = self.admit(&principal).await;
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
                    if let Some(end) = self.carry_out_persist(persist).await {
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

    /// Does what a new session needs before the client is told it authenticated: with the
    /// `delegated` policy, obtains the principal's upstream token (see
    /// [`super::delegated::DelegatedUpstream::admit`]). `Err` is the message the failed
    /// authentication carries to the client.
    async fn admit(
        &mut self,
        principal: &portcullis::principal::Principal,
    ) -> Result<(), portcullis::connection::AdmissionRefused> {
        let Some(delegated) = self.shared.delegated.as_ref() else {
            return Ok(());
        };
        match delegated.admit(principal, &self.shared.upstream).await {
            Ok(Some(admitted)) => {
                self.admitted_settings = Some(admitted.settings);
                self.upstream_lease = Some(admitted.lease);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                match e {
                    // The operator's side of a refusal (the missing ACL and the command that grants
                    // it) was logged at WARN where the upstream refused.
                    super::delegated::DelegatedError::Refused { .. } => {
                        tracing::debug!(peer = %self.peer, principal = %principal, error = %e, "session refused");
                    }
                    _ => {
                        tracing::warn!(peer = %self.peer, principal = %principal, error = %e, "cannot obtain the client's upstream token; its authentication fails");
                    }
                }
                Err(portcullis::connection::AdmissionRefused::new(
                    e.client_message(),
                ))
            }
        }
    }

    /// Queues one client frame for the upstream (sent by [`Driver::flush_upstream`]); its entry
    /// goes into the response queue first, so its answer always finds it.
    async fn forward(&mut self, request: Forwarded) -> Result<(), DriverError> {
        self.open_upstream(&request.identity).await?;
        let Some(upstream) = self.upstream.as_mut() else {
            return Err(self.upstream_error(UpstreamError::Closed));
        };
        if let Err(source) = upstream.reauthenticate_if_due(&self.queue).await {
            return Err(self.upstream_error(source));
        }
        let Some(upstream) = self.upstream.as_mut() else {
            return Err(self.upstream_error(UpstreamError::Closed));
        };
        if request.expects_response {
            self.queue.push_pending(Pending {
                plan: request.plan,
                api_key: request.api_key,
                api_version: request.api_version,
                correlation_id: request.correlation_id,
                upstream_call: crate::telemetry::traces::UpstreamCall::start(
                    &self.request_span,
                    request.api_key,
                    Some(upstream.address()),
                ),
            });
        }
        if let Err(source) = upstream.send(request.frame) {
            return Err(self.upstream_error(source));
        }
        Ok(())
    }

    /// Opens the connection's upstream on the first forwarded request, and hands its read half
    /// to the response side.
    async fn open_upstream(
        &mut self,
        identity: &portcullis::forwarding::UpstreamIdentity,
    ) -> Result<(), DriverError> {
        if self.upstream.is_some() {
            return match &self.upstream_identity {
                Some(opened) if opened != identity => Err(DriverError::IdentitySwitched {
                    opened: opened.clone(),
                    requested: identity.clone(),
                }),
                _ => Ok(()),
            };
        }
        // Who the connection acts as: the service login, or (delegated) the principal's token,
        // normally obtained when the session was admitted.
        let own_settings = match self.admitted_settings.take() {
            Some(settings) if *identity == UpstreamIdentity::Delegated => Some(settings),
            admitted => {
                self.admitted_settings = admitted;
                let (own_settings, lease) = super::delegated::connection_settings(
                    self.shared.delegated.as_ref(),
                    &self.shared.upstream,
                    identity,
                    self.connection.session().map(|s| &s.principal),
                )
                .await?;
                if lease.is_some() {
                    self.upstream_lease = lease;
                }
                own_settings
            }
        };
        let settings = own_settings.as_ref().unwrap_or(&self.shared.upstream);
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
        let (sender, reader) = connection.into_halves(settings.connect_timeout);
        self.queue.push_upstream(reader);
        self.upstream = Some(sender);
        self.upstream_identity = Some(identity.clone());
        Ok(())
    }

    /// Has the response side write the answers to every request already received (waiting for
    /// the upstream's), then moves on to closing. No client frame is read. Bounded by
    /// [`DRAIN_TIMEOUT`], so a silent upstream cannot hold the connection open.
    async fn drain(&mut self, end: End) -> Phase {
        self.queue.finish();
        let finished = match std::mem::replace(&mut self.responses, ResponseTask::Gone) {
            ResponseTask::Running(mut handle) => match timeout(DRAIN_TIMEOUT, &mut handle).await {
                Ok(finished) => finished,
                Err(_) => {
                    tracing::debug!(peer = %self.peer, target = ?self.target, "gave up waiting for in-flight responses before closing");
                    self.queue.stop();
                    handle.await
                }
            },
            ResponseTask::Ended(finished) => Ok(finished),
            ResponseTask::Gone => return Phase::Closing(end),
        };
        let finished = match finished {
            Ok(finished) => finished,
            Err(e) => return Phase::Gone(End::Failed(DriverError::ResponseSide(e.to_string()))),
        };
        let Finished { ended, client } = finished;
        match ended {
            Ended::Client(e) => return Phase::Gone(End::Failed(e)),
            Ended::Upstream(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "while answering in-flight requests before closing");
            }
            Ended::Drained | Ended::Stopped => {}
        }
        self.responses = ResponseTask::Ended(Finished {
            ended: Ended::Stopped,
            client,
        });
        Phase::Closing(end)
    }

    /// Stops the response side where it is and takes the client's write half back.
    async fn stop_responses(&mut self) -> Option<Finished> {
        match std::mem::replace(&mut self.responses, ResponseTask::Gone) {
            ResponseTask::Running(handle) => {
                self.queue.stop();
                handle.await.ok()
            }
            ResponseTask::Ended(finished) => Some(finished),
            ResponseTask::Gone => None,
        }
    }

    /// The lingering close: pause after the last answer (discarding input), FIN, then discard
    /// input until the client closes or [`LINGER`] passes. Never leaves unread input behind when
    /// the client cooperates, so the kernel has no reason to send a reset.
    async fn close_lingering(&mut self) {
        let Some(Finished { mut client, .. }) = self.stop_responses().await else {
            return;
        };
        let mut client_closed = false;
        if let Some(last_write) = self.queue.last_write() {
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
        match timeout(LINGER, client.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
        if !client_closed {
            let _ = timeout(LINGER, self.reader.discard_until_eof()).await;
        }
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
                let message = "connection closed by the security layer";
                match reason.disposition().log {
                    LogLevel::Warn => tracing::warn!(%peer, ?target, %reason, "{message}"),
                    LogLevel::Info => tracing::info!(%peer, ?target, %reason, "{message}"),
                    _ => tracing::debug!(%peer, ?target, %reason, "{message}"),
                }
            }
            End::Failed(
                e @ (DriverError::Upstream { .. }
                | DriverError::Rewrite(_)
                | DriverError::Delegated(_)
                | DriverError::Authorization(_)
                | DriverError::Step(_)
                | DriverError::ResponseSide(_)
                | DriverError::IdentitySwitched { .. }),
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
async fn read_request<R: ReadSource>(
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
