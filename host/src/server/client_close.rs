//! How a client connection ends: the drain (answering what was already forwarded), the lingering
//! close (see `client`'s module documentation for why), and the log line saying why it ended.

use portcullis::connection::LogLevel;
use tokio::io::AsyncWriteExt;
use tokio::time::{timeout, timeout_at};

use super::client::{Driver, End, Phase, ResponseTask, DRAIN_TIMEOUT, LINGER};
use super::driver_error::DriverError;
use super::responses::{Ended, Finished};

impl Driver {
    /// Has the response side write the answers to every request already received (waiting for
    /// the upstream's), then moves on to closing. No client frame is read. Bounded by
    /// [`DRAIN_TIMEOUT`], so a silent upstream cannot hold the connection open.
    pub(super) async fn drain(&mut self, end: End) -> Phase {
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
            Err(e) => return Phase::Gone(End::Failed(DriverError::ResponseSide(e.into()))),
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
    pub(super) async fn close_lingering(&mut self) {
        let Some(Finished { mut client, .. }) = self.stop_responses().await else {
            return;
        };
        let mut client_closed = false;
        if let Some(last_write) = self.queue.last_write() {
            // Long enough for the client to read the answers in a read of their own.
            let pause_end = last_write + self.live.limits.close_pause;
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

    pub(super) fn log_end(&self, end: &End) {
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
