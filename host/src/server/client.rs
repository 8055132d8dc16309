//! One client connection: a single task and a single loop that reads the client's frames and the
//! upstream's responses, feeds frames to the framework's [`Connection`] and carries out the
//! [`Action`]s it returns, and writes responses back in request order.
//!
//! ```text
//!            ┌──────────── select! ────────────┐
//! client ──► FrameReader ─► Connection::handle_frame ─► Respond ─────────────► ResponseQueue ─► client
//!                                                    └► Forward ─► upstream ─► (response) ─┘
//! ```
//!
//! Both reads are cancel-safe, so whichever side has data is served first. Writes happen between
//! iterations of the loop: the client is written to as soon as the head of the queue is ready.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use portcullis::connection::{Action, CloseReason, Connection};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter, ReadHalf, WriteHalf};

use super::frames::{write_frame, FrameError, FrameReader, ReadOutcome};
use super::listeners::{self, Target};
use super::queue::{Pending, ResponseQueue};
use super::rewrite::{carries_addresses, rewrite, RewriteError};
use super::upstream::{UpstreamConnection, UpstreamError};
use super::wire::response_correlation_id;
use super::Shared;

/// Requests a client may have outstanding before Portcullis stops reading from it. Clients
/// pipeline up to their `max.in.flight` requests; beyond this the socket's own back-pressure
/// slows them down.
pub const MAX_IN_FLIGHT: usize = 100;

/// How long a closing connection waits for the answers to requests it already forwarded (Kafka's
/// default `request.timeout.ms`).
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How a connection ended normally.
#[derive(Debug)]
enum End {
    /// The client closed its side.
    ClientClosed,
    /// The framework asked to close at once.
    Closed(CloseReason),
    /// The framework asked to close after a delay (a failed authentication).
    ClosedAfterDelay,
    /// Portcullis is stopping.
    Shutdown,
}

/// Why a connection ended abnormally.
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
}

/// Serves one accepted client connection until it closes.
pub(super) async fn serve<S>(
    shared: Arc<Shared>,
    stream: S,
    peer: SocketAddr,
    target: Target,
    tls: Option<portcullis::principal::TlsPeer>,
) where
    S: AsyncRead + AsyncWrite + Send,
{
    let (read, write) = tokio::io::split(stream);
    let mut connection =
        Connection::new(shared.connection_config.clone(), peer.ip(), tls.is_some());
    if let Some(tls_peer) = tls {
        connection = connection.with_tls_peer(Arc::new(tls_peer));
    }
    let mut driver = Driver {
        shared,
        target,
        connection,
        reader: FrameReader::new(read),
        writer: BufWriter::new(write),
        queue: ResponseQueue::new(),
        upstream: None,
    };
    match driver.run().await {
        Ok(End::Closed(reason)) => {
            tracing::debug!(%peer, ?target, ?reason, "connection closed by the security layer")
        }
        Ok(end) => tracing::debug!(%peer, ?target, ?end, "connection closed"),
        Err(
            e @ (DriverError::Upstream { .. }
            | DriverError::Rewrite(_)
            | DriverError::Authorization(_)),
        ) => {
            tracing::warn!(%peer, ?target, error = %e, "closing client connection")
        }
        Err(e) => tracing::debug!(%peer, ?target, error = %e, "connection closed"),
    }
    // Best effort: the peer may already be gone.
    let _ = driver.writer.shutdown().await;
}

struct Driver<S> {
    shared: Arc<Shared>,
    target: Target,
    connection: Connection,
    reader: FrameReader<ReadHalf<S>>,
    writer: BufWriter<WriteHalf<S>>,
    queue: ResponseQueue,
    upstream: Option<UpstreamConnection>,
}

enum Event {
    Client(Result<ReadOutcome, FrameError>),
    Upstream(Result<Bytes, UpstreamError>),
    Revoked,
    Shutdown,
}

impl<S: AsyncRead + AsyncWrite> Driver<S> {
    async fn run(&mut self) -> Result<End, DriverError> {
        let mut shutdown = self.shared.shutdown.clone();
        loop {
            self.write_ready().await?;
            let max_frame = self.connection.max_frame_size();
            let can_read = self.queue.len() < MAX_IN_FLIGHT;
            let awaiting_upstream = self.queue.has_pending();
            let ticket = self.connection.ticket();
            let event = tokio::select! {
                // A dropped sender also means the server is gone.
                _ = shutdown.changed() => Event::Shutdown,
                // The session's credential was removed or changed: close at once, even if idle.
                () = revoked(ticket.as_ref()) => Event::Revoked,
                response = next_response(&mut self.upstream), if awaiting_upstream => Event::Upstream(response),
                read = self.reader.next_frame(max_frame), if can_read => Event::Client(read),
            };
            let end = match event {
                Event::Shutdown => Some(End::Shutdown),
                Event::Revoked => {
                    self.shared
                        .connection_config
                        .metrics
                        .revoked_connections_closed();
                    Some(End::Closed(CloseReason::CredentialRevoked))
                }
                Event::Client(read) => match read? {
                    ReadOutcome::Frame(frame) => {
                        let actions = self.connection.handle_frame(frame, now_ms());
                        self.apply(actions).await?
                    }
                    ReadOutcome::TooLarge(size) => {
                        let actions = self.connection.frame_too_large(size);
                        self.apply(actions).await?
                    }
                    ReadOutcome::Closed => Some(End::ClientClosed),
                },
                Event::Upstream(response) => {
                    let response = response.map_err(|source| self.upstream_error(source))?;
                    self.on_upstream_response(response)?;
                    None
                }
            };
            if let Some(end) = end {
                return Ok(end);
            }
        }
    }

    /// Carries out the framework's actions for one frame, in order.
    async fn apply(&mut self, actions: Vec<Action>) -> Result<Option<End>, DriverError> {
        let mut forwarded = false;
        for action in actions {
            match action {
                Action::Respond(frame) => self.queue.push_ready(frame),
                Action::Forward(request) => {
                    let upstream = self.upstream().await?;
                    if let Err(source) = upstream.reauthenticate_if_due().await {
                        return Err(self.upstream_error(source));
                    }
                    let Some(upstream) = self.upstream.as_mut() else {
                        return Err(self.upstream_error(UpstreamError::Closed));
                    };
                    if let Err(source) = upstream.send(&request.frame).await {
                        return Err(self.upstream_error(source));
                    }
                    forwarded = true;
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
                        return Ok(Some(end));
                    }
                }
                Action::CloseAfter(delay) => {
                    self.write_ready().await?;
                    tokio::time::sleep(delay).await;
                    return Ok(Some(End::ClosedAfterDelay));
                }
                Action::Close(reason) => return Ok(Some(End::Closed(reason))),
                Action::CloseAfterInFlight(reason) => {
                    self.drain_in_flight().await?;
                    return Ok(Some(End::Closed(reason)));
                }
            }
        }
        if forwarded {
            if let Some(upstream) = self.upstream.as_mut() {
                if let Err(source) = upstream.flush().await {
                    return Err(self.upstream_error(source));
                }
            }
        }
        Ok(None)
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
        let Some(pending) = self.queue.oldest_pending().cloned() else {
            let got = response_correlation_id(&response).unwrap_or(-1);
            return Err(self.upstream_error(UpstreamError::OutOfOrder { expected: -1, got }));
        };
        let got = response_correlation_id(&response).unwrap_or(-1);
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

    /// Answers every request already received, then returns: no more client frames are read.
    /// Bounded by [`DRAIN_TIMEOUT`] so a silent upstream cannot hold the connection open.
    async fn drain_in_flight(&mut self) -> Result<(), DriverError> {
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            loop {
                self.write_ready().await?;
                if !self.queue.has_pending() {
                    return Ok(());
                }
                let response = next_response(&mut self.upstream).await;
                let response = response.map_err(|source| self.upstream_error(source))?;
                self.on_upstream_response(response)?;
            }
        })
        .await;
        match drained {
            Ok(result) => result,
            Err(_) => {
                tracing::debug!(target = ?self.target, "gave up waiting for in-flight responses before closing");
                Ok(())
            }
        }
    }

    /// Writes every response at the head of the queue that is ready.
    async fn write_ready(&mut self) -> Result<(), DriverError> {
        let mut wrote = false;
        while let Some(frame) = self.queue.pop_ready() {
            write_frame(&mut self.writer, &frame).await?;
            wrote = true;
        }
        if wrote {
            self.writer.flush().await.map_err(FrameError::Io)?;
        }
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
}

// ---- Local writes: the Persist effect (delegation tokens, ACLs, SCRAM credentials) ----------

impl<S: AsyncRead + AsyncWrite> Driver<S> {
    /// Appends a local handler's records through the store writer, off the request path, and
    /// queues the answer its continuation builds in this request's place. The connection reads
    /// nothing more meanwhile (Kafka answers one request of a connection at a time); other
    /// connections are served by other tasks.
    async fn carry_out_persist(&mut self, persist: portcullis::local::Persist) -> Option<End> {
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
