//! The response side of a client connection: its own task, which reads the upstream and writes
//! the client, answering the entries of the connection's [`ResponseQueue`] from the front.
//!
//! ```text
//!  request side ── entries ──► ResponseQueue ──► response side ──► client socket (write half)
//!                                                      ▲
//!                                 upstream socket (read half)
//! ```
//!
//! - A **ready** entry (a local answer) is written as it is.
//! - An **awaited** entry takes the next upstream response ([`super::relay`] checks its correlation
//!   id first). A response that needs no change is relayed **as it arrives**: whatever part of it
//!   a read brought in goes to the client in the next write, so a 1 MiB Fetch response is on its
//!   way to the client while the rest is still coming from the broker, and is never held whole.
//!   A response that is filtered by authorization or carries broker addresses is collected whole,
//!   changed, then written. Portcullis' own requests (a re-authentication) get their answers
//!   handed back to the request side.
//! - Everything collected before the next wait goes out in **one vectored write**: several
//!   pipelined answers, and the local answers between them, share one system call.
//!
//! The upstream socket is read at all times, also when nothing is awaited, so a broker that
//! closes the connection ends it at once. The side ends when it reaches the queue's `Finish`
//! (a drain is complete), when told to stop, or when the upstream or the client fails; it hands
//! the client's write half back for the lingering close.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::time::{timeout_at, Instant};

use super::driver_error::DriverError;
use super::frames::{read_some, FrameError, Outgoing, MIN_READ};
use super::queue::{Entry, Head, Pending, ResponseQueue};
use super::relay::{Relay, Step};
use super::rewrite::{carries_addresses, rewrite};
use super::sockets::{ClientWrite, UpstreamRead};
use super::splice::Pipe;
use super::upstream::{UpstreamError, UpstreamReader};
use super::Shared;

/// Room of a read while a response is awaited: one read takes as much of a large Fetch response
/// as the socket holds.
const RESPONSE_READ: usize = 256 * 1024;
/// The least rest of a streamed response that is spliced (socket to socket through a pipe, on
/// plain TCP) rather than read and written: below it, one copy costs less than making a pipe.
const SPLICE_MIN: usize = 16 * 1024;
/// Responses come from the operator's own cluster; this only guards against a broken length.
const MAX_WHOLE_RESPONSE: usize = i32::MAX as usize;

/// Why the response side ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// It wrote every response owed up to the queue's `Finish`.
    Drained,
    /// It was told to stop.
    Stopped,
    /// The upstream closed or failed, or sent something that cannot be forwarded: the client
    /// connection must close.
    Upstream(DriverError),
    /// Writing to the client failed or stalled: nothing more can be written.
    Client(DriverError),
}

impl Ended {
    /// How it ended, in a word, for an error that names it.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Ended::Drained => "drained",
            Ended::Stopped => "stopped",
            Ended::Upstream(_) => "lost the upstream",
            Ended::Client(_) => "lost the client",
        }
    }
}

/// What the response side hands back when it ends.
#[derive(Debug)]
pub(super) struct Finished {
    /// Why it ended.
    pub ended: Ended,
    /// The client's write half, for the lingering close.
    pub client: ClientWrite,
}

/// The upstream's read half and the bytes read from it but not yet handed out.
struct Upstream {
    address: String,
    read: UpstreamRead,
    buffer: BytesMut,
    /// Bytes at the front of `buffer` already committed to the next write (relayed unchanged).
    relayed: usize,
}

impl Upstream {
    fn new(reader: UpstreamReader) -> Self {
        Self {
            address: reader.address,
            read: reader.read,
            buffer: reader.buffer,
            relayed: 0,
        }
    }

    /// The bytes the relay has not handed out yet.
    fn unhandled(&self) -> &[u8] {
        self.buffer.get(self.relayed..).unwrap_or_default()
    }

    /// Moves the bytes committed to the next write to `out`, in one piece.
    fn commit_relayed(&mut self, out: &mut Outgoing) {
        if self.relayed > 0 {
            super::splice::count_buffered(self.relayed);
            out.push_raw(self.buffer.split_to(self.relayed).freeze());
            self.relayed = 0;
        }
    }

    fn error(&self, source: UpstreamError) -> DriverError {
        DriverError::Upstream {
            address: self.address.clone(),
            source,
        }
    }
}

/// What to do after collecting.
enum Next {
    /// Wait for the upstream (reading up to `room` bytes) or for the request side.
    Wait { room: usize, idle: bool },
    /// Move up to `len` bytes of the streamed response being relayed straight from the upstream
    /// socket to the client socket ([`super::splice`]).
    Splice { len: usize },
    /// The queue's end was reached.
    Finish,
    /// Stop at once.
    Stop,
}

/// The response side of one client connection.
pub(super) struct ResponseSide {
    shared: Arc<Shared>,
    queue: Arc<ResponseQueue>,
    client: ClientWrite,
    out: Outgoing,
    upstream: Option<Upstream>,
    relay: Relay,
    /// The pipe of the response being spliced (none between responses).
    pipe: Option<Pipe>,
    /// Set when a pipe could not be made (out of descriptors, the user's pipe pages used up):
    /// the response being relayed is copied; the next one tries again.
    copy_this_response: bool,
    /// A client that reads nothing for this long is given up.
    stall: Duration,
}

impl ResponseSide {
    pub(super) fn new(
        shared: Arc<Shared>,
        stall: Duration,
        queue: Arc<ResponseQueue>,
        client: ClientWrite,
    ) -> Self {
        Self {
            shared,
            queue,
            client,
            out: Outgoing::new(),
            upstream: None,
            relay: Relay::new(MAX_WHOLE_RESPONSE),
            pipe: None,
            copy_this_response: false,
            stall,
        }
    }

    /// Answers the queue until the side ends; then the queue accepts nothing more.
    pub(super) async fn run(mut self) -> Finished {
        let ended = self.answer().await;
        self.queue.close();
        Finished {
            ended,
            client: self.client,
        }
    }

    async fn answer(&mut self) -> Ended {
        loop {
            let next = self.collect();
            if matches!(next, Ok(Next::Stop)) {
                return Ended::Stopped;
            }
            let wrote = self.has_output();
            // Also before an upstream error: the answers collected before it are complete.
            if let Err(ended) = self.write_out().await {
                return ended;
            }
            match next {
                // A write takes time, and meanwhile the request side may have queued answers (its
                // wake-up was taken by the write) and the upstream may have sent more: collect
                // again rather than wait on what was decided before the write.
                Ok(Next::Wait { .. }) if wrote => {}
                Ok(Next::Wait { room, idle }) => {
                    if let Err(ended) = self.wait(room, idle).await {
                        return ended;
                    }
                }
                // Whatever was collected before it is written: the spliced bytes follow it.
                Ok(Next::Splice { len }) => {
                    if let Err(ended) = self.splice(len).await {
                        return ended;
                    }
                }
                Ok(Next::Finish) => return Ended::Drained,
                Ok(Next::Stop) => return Ended::Stopped,
                Err(e) => return Ended::Upstream(e),
            }
        }
    }

    /// Whether a write is owed: collected answers, or relayed bytes not yet committed.
    fn has_output(&self) -> bool {
        !self.out.is_empty() || self.upstream.as_ref().is_some_and(|u| u.relayed > 0)
    }

    /// Takes every entry at the front of the queue that can be answered with the bytes at hand,
    /// and queues their bytes for one write.
    fn collect(&mut self) -> Result<Next, DriverError> {
        loop {
            match self.queue.head() {
                Head::Stop => return Ok(Next::Stop),
                Head::Finish => return Ok(Next::Finish),
                Head::Ready => {
                    if let Some(Entry::Ready(frame)) = self.queue.pop() {
                        if let Some(upstream) = self.upstream.as_mut() {
                            upstream.commit_relayed(&mut self.out);
                        }
                        self.out.push_frame(frame).map_err(DriverError::Client)?;
                    }
                }
                Head::Upstream => {
                    if let Some(Entry::Upstream(reader)) = self.queue.pop() {
                        self.upstream = Some(Upstream::new(reader));
                    }
                }
                Head::Empty => {
                    let Some(upstream) = self.upstream.as_ref() else {
                        return Ok(Next::Wait {
                            room: MIN_READ,
                            idle: true,
                        });
                    };
                    // Bytes nobody awaits are an error (once their correlation id is read).
                    self.relay
                        .step(upstream.unhandled(), None)
                        .map_err(|e| upstream.error(e.into()))?;
                    return Ok(Next::Wait {
                        room: MIN_READ,
                        idle: true,
                    });
                }
                Head::Awaiting(expected) => {
                    let Some(upstream) = self.upstream.as_mut() else {
                        // Cannot happen: the upstream's entry precedes the first request sent.
                        return Err(DriverError::Upstream {
                            address: "upstream".to_owned(),
                            source: UpstreamError::Closed,
                        });
                    };
                    let step = self
                        .relay
                        .step(upstream.unhandled(), Some(expected))
                        .map_err(|e| upstream.error(e.into()))?;
                    match step {
                        Step::Pass { len, last } => {
                            upstream.relayed += len;
                            if last {
                                if let Some(Entry::Pending(pending)) = self.queue.pop() {
                                    pending.upstream_call.finish();
                                }
                                // A response whose rest was short enough to read ends here.
                                self.pipe = None;
                                self.copy_this_response = false;
                            }
                        }
                        Step::Whole { len } => {
                            upstream.commit_relayed(&mut self.out);
                            upstream.buffer.advance(4);
                            let frame = upstream.buffer.split_to(len).freeze();
                            match self.queue.pop() {
                                Some(Entry::Pending(pending)) => {
                                    pending.upstream_call.finish();
                                    let frame = self.change(&pending, frame)?;
                                    self.out.push_frame(frame).map_err(DriverError::Client)?;
                                }
                                Some(Entry::Internal(internal)) => {
                                    // The request side may have given up; nothing to do then.
                                    let _ = internal.reply.send(frame);
                                }
                                _ => {}
                            }
                        }
                        // Inside a streamed response with nothing buffered: its rest may bypass
                        // the buffer.
                        Step::Read { missing }
                            if missing >= SPLICE_MIN
                                && self.relay.rest_of_response() == missing
                                && self.can_splice() =>
                        {
                            return Ok(Next::Splice { len: missing })
                        }
                        Step::Read { missing } => {
                            return Ok(Next::Wait {
                                room: missing.max(RESPONSE_READ),
                                idle: false,
                            })
                        }
                    }
                }
            }
        }
    }

    /// Whether bytes can go from the upstream socket to the client socket without Portcullis'
    /// buffers: both plain TCP, and a pipe could be made so far.
    fn can_splice(&self) -> bool {
        !self.copy_this_response
            && self.client.plain().is_some()
            && self
                .upstream
                .as_ref()
                .is_some_and(|upstream| upstream.read.plain().is_some())
    }

    /// Moves up to `len` bytes of the streamed response being relayed from the upstream socket
    /// into the pipe as soon as some arrive (one splice), then all of them on into the client
    /// socket. A client that takes nothing for `connections_max_idle_ms` is given up, as in
    /// [`Self::write_out`]; a stop interrupts either wait.
    async fn splice(&mut self, len: usize) -> Result<(), Ended> {
        let Self {
            queue,
            client,
            upstream,
            relay,
            pipe: pipe_slot,
            copy_this_response,
            stall,
            ..
        } = self;
        let (Some(upstream), Some(to)) = (upstream.as_ref(), client.plain()) else {
            return Ok(());
        };
        let Some(from) = upstream.read.plain() else {
            return Ok(());
        };
        let pipe = match pipe_slot {
            Some(pipe) => pipe,
            None => match Pipe::new() {
                Ok(pipe) => pipe_slot.insert(pipe),
                Err(e) => {
                    // Copying works without one.
                    tracing::debug!(error = %e, "cannot make a pipe; this response is copied");
                    *copy_this_response = true;
                    return Ok(());
                }
            },
        };
        let filled = tokio::select! {
            biased;
            // A stop, or answers queued behind this response: collect again.
            () = queue.woken() => return Ok(()),
            filled = pipe.fill(from, len) => filled,
        };
        let moved = match filled {
            Ok(0) => return Err(Ended::Upstream(upstream.error(UpstreamError::Closed))),
            Ok(moved) => moved,
            Err(e) => {
                return Err(Ended::Upstream(
                    upstream.error(UpstreamError::Frame(FrameError::Io(e))),
                ))
            }
        };
        if relay.passed_directly(moved) {
            // Its last byte came from the upstream (as on the copying path: the upstream call's
            // time does not include the client's).
            if let Some(Entry::Pending(pending)) = queue.pop() {
                pending.upstream_call.finish();
            }
        }
        let last = !relay.inside_response();
        let deadline = Instant::now() + *stall;
        // Its own block: the drain borrows the pipe, which may be closed after it.
        {
            let drain = timeout_at(deadline, pipe.drain(to));
            tokio::pin!(drain);
            loop {
                tokio::select! {
                    biased;
                    drained = &mut drain => {
                        match drained {
                            Ok(Ok(())) => break,
                            Ok(Err(e)) => {
                                return Err(Ended::Client(DriverError::Client(FrameError::Io(e))))
                            }
                            Err(_) => return Err(Ended::Client(DriverError::WriteStalled(*stall))),
                        }
                    }
                    () = queue.woken() => {
                        if queue.stopping() {
                            return Err(Ended::Stopped);
                        }
                    }
                }
            }
        }
        queue.wrote(Instant::now());
        if last {
            // An idle connection holds no pipe.
            *pipe_slot = None;
        }
        Ok(())
    }

    /// Authorization first (filter what this principal may not see, merge the locally denied
    /// entries back in), then the broker addresses.
    fn change(&self, pending: &Pending, response: Bytes) -> Result<Bytes, DriverError> {
        let response = if pending.plan.is_unchanged() {
            response
        } else {
            pending.plan.apply(response)?.frame
        };
        if !carries_addresses(pending.api_key) {
            return Ok(response);
        }
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
            shared.broker_listeners.ensure(shared, node_id);
        }
        Ok(rewritten.frame)
    }

    /// Writes what was collected, in one vectored write as far as the socket takes it. A client
    /// that reads nothing for `connections_max_idle_ms` is given up; a stop interrupts the write.
    async fn write_out(&mut self) -> Result<(), Ended> {
        if let Some(upstream) = self.upstream.as_mut() {
            upstream.commit_relayed(&mut self.out);
        }
        if self.out.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + self.stall;
        let write = timeout_at(deadline, self.out.write_to(&mut self.client));
        tokio::pin!(write);
        loop {
            tokio::select! {
                biased;
                written = &mut write => {
                    return match written {
                        Ok(Ok(())) => {
                            self.queue.wrote(Instant::now());
                            Ok(())
                        }
                        Ok(Err(e)) => Err(Ended::Client(DriverError::Client(FrameError::Io(e)))),
                        Err(_) => Err(Ended::Client(DriverError::WriteStalled(self.stall))),
                    };
                }
                () = self.queue.woken() => {
                    if self.queue.stopping() {
                        return Err(Ended::Stopped);
                    }
                }
            }
        }
    }

    /// Waits for upstream bytes (reading up to `room`) or for the request side. The upstream is
    /// read even when nothing is awaited: its end closes the client connection at once.
    async fn wait(&mut self, room: usize, idle: bool) -> Result<(), Ended> {
        let Some(upstream) = self.upstream.as_mut() else {
            self.queue.woken().await;
            return Ok(());
        };
        let read = tokio::select! {
            biased;
            () = self.queue.woken() => return Ok(()),
            read = read_some(&mut upstream.read, &mut upstream.buffer, room, idle) => read,
        };
        match read {
            Ok(0) => Err(Ended::Upstream(upstream.error(UpstreamError::Closed))),
            Ok(_) => Ok(()),
            Err(e) => Err(Ended::Upstream(
                upstream.error(UpstreamError::Frame(FrameError::Io(e))),
            )),
        }
    }
}
