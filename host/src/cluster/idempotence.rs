//! Forwarded mutations applied once (issue 25): the node's request ids, its table of the
//! requests the writer applied (every node follows it in the log, so a new writer knows what its
//! predecessor applied), and the writer's housekeeping that tombstones the table's records once
//! no retry can come (`portcullis::local::forwarded::dedup` has the rules).

use std::sync::Arc;
use std::time::Duration;

use portcullis::local::forwarded::dedup::ForwardedRequests;
use portcullis::local::forwarded::{RequestId, RequestIds};
use portcullis::local::PersistError;
use portcullis::store::{MetadataStore, StoreError, StoredRecord};
use portcullis::tokens::TokenManager;

use super::Cluster;
use crate::clock::now_ms;

/// How long a record of an applied request is kept at least, whatever `forward_timeout_ms`: a
/// forwarder retries a request for at most `forward_timeout_ms` (plus one attempt's 8 s), and
/// the writers' clocks may differ.
const MIN_RETENTION: Duration = Duration::from_secs(600);
/// The retention in forward timeouts, when that is longer.
const RETENTION_TIMEOUTS: u32 = 10;
/// The most records kept (about 300 bytes each in memory); beyond it the oldest go first.
const MAX_ENTRIES: usize = 100_000;
/// Tombstones per append.
const TOMBSTONES_PER_BATCH: usize = 1_000;
/// How often the writer looks for records to tombstone.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// How long a retry that finds its request applied but unanswered waits for the answer: the
/// first attempt may still be running on this writer (the forwarder gave up on it after 8 s).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// The node's part in running each forwarded mutation once.
pub struct Idempotence {
    pub(super) applied: Arc<ForwardedRequests>,
    ids: RequestIds,
    tokens: Option<Arc<TokenManager>>,
}

impl std::fmt::Debug for Idempotence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotence")
            .field("ids", &self.ids)
            .field("applied", &self.applied.len())
            .finish_non_exhaustive()
    }
}

impl Idempotence {
    /// Follows `store` from offset 0 (call it before the store's `replay_done`); `tokens`
    /// recomputes the HMAC of a token in the answer to a retried CreateDelegationToken (the log
    /// records it without).
    ///
    /// # Errors
    /// The log could not be read.
    pub fn follow(
        store: &dyn MetadataStore,
        node_id: i32,
        tokens: Option<Arc<TokenManager>>,
    ) -> Result<Self, StoreError> {
        let applied = Arc::new(ForwardedRequests::new());
        let table = Arc::clone(&applied);
        store.subscribe(
            0,
            Box::new(move |records: &[StoredRecord]| table.apply(records)),
        )?;
        Ok(Self {
            applied,
            // A random boot part: a restarted node never reuses the ids of its previous life.
            ids: RequestIds::new(node_id, rand::random()),
            tokens,
        })
    }

    /// A fresh request id, for all the attempts of one mutation.
    pub(super) fn next_id(&self) -> RequestId {
        self.ids.next()
    }

    /// The token's HMAC under the cluster's secret, if tokens are enabled.
    pub(super) fn token_hmac(&self, token_id: &str) -> Option<Vec<u8>> {
        self.tokens.as_ref().map(|t| t.hmac(token_id).to_vec())
    }

    /// Waits (up to 2 s) while `id` is applied but unanswered: its first attempt may be about to
    /// record the answer.
    pub(super) async fn wait_for_answer(&self, id: &RequestId) {
        let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
        while self.applied.unanswered(id) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The retention of an applied request's record for a forward timeout.
fn retention(forward_timeout: Duration) -> Duration {
    (forward_timeout * RETENTION_TIMEOUTS).max(MIN_RETENTION)
}

/// On the writer, every 30 s: tombstones the records of applied requests past their retention
/// (elsewhere nothing: the writer's tombstones reach every node's table through the log).
pub fn spawn_housekeeping(cluster: Arc<Cluster>) -> tokio::task::JoinHandle<()> {
    let retention_ms =
        i64::try_from(retention(cluster.forward_timeout).as_millis()).unwrap_or(i64::MAX);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            if !cluster.store.is_writer() {
                continue;
            }
            let applied = &cluster.idempotence.applied;
            while let Some(batch) =
                applied.expired(now_ms(), retention_ms, MAX_ENTRIES, TOMBSTONES_PER_BATCH)
            {
                let count = batch.records.len();
                match cluster.writer.persist(batch).await {
                    Ok(_) => tracing::debug!(count, "applied forwarded requests forgotten"),
                    // Another writer took over: it sweeps from now on.
                    Err(PersistError::NotLeader) => break,
                    Err(e) => {
                        tracing::warn!(error = ?e, "tombstoning applied forwarded requests failed");
                        break;
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_outlive_every_retry() {
        assert_eq!(retention(Duration::from_secs(30)), MIN_RETENTION);
        assert_eq!(
            retention(Duration::from_secs(120)),
            Duration::from_secs(1200)
        );
    }
}
