//! The store's append queue: every append of a running node goes through one dedicated thread,
//! so no `fsync` ever runs on a tokio worker, and appends that arrive while one is being synced
//! are written together with one `fsync` (group commit).
//!
//! ```text
//! connection ─┐                          ┌─ append_group([b1, b2, b3]) ─ one log fsync + one commit fsync
//! connection ─┼─► queue ─► writer thread ┤
//! token sweep ┘                          └─ each writer gets its own result, in order
//! ```
//!
//! A connection awaits its own write (Kafka answers a connection's requests in order, so nothing
//! else of that connection could be answered first) while its worker thread serves other
//! connections. When enough of the log is dead, a separate thread compacts it, and appends keep
//! flowing meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use portcullis::local::{PersistError, PersistOutcome};
use portcullis::store::{AppendBatch, MetadataStore};
use tokio::sync::{mpsc, oneshot};

/// Appends waiting to be written; senders wait (asynchronously) when it is full.
const QUEUE: usize = 4_096;
/// The most batches one group commit takes.
const MAX_GROUP: usize = 1_024;

struct Job {
    batch: AppendBatch,
    reply: oneshot::Sender<PersistOutcome>,
}

/// A handle to the writer thread; cheap to clone. The thread ends when every handle is dropped.
#[derive(Clone)]
pub struct AppendQueue {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for AppendQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendQueue").finish_non_exhaustive()
    }
}

impl AppendQueue {
    /// Starts the writer thread for `store`.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(store: Arc<dyn MetadataStore>) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>(QUEUE);
        let compacting = Arc::new(AtomicBool::new(false));
        std::thread::Builder::new()
            .name("portcullis-store-writer".into())
            .spawn(move || write_loop(&store, queue, &compacting))?;
        Ok(Self { jobs })
    }

    /// Appends `batch` and returns once it is durable and applied to the node's views (or why
    /// not).
    pub async fn persist(&self, batch: AppendBatch) -> PersistOutcome {
        let (reply, answer) = oneshot::channel();
        if self.jobs.send(Job { batch, reply }).await.is_err() {
            return Err(PersistError::Failed(
                "the store writer has stopped".to_owned(),
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(PersistError::Failed(
                "the store writer has stopped".to_owned(),
            ))
        })
    }

    /// [`persist`](Self::persist) for threads outside the async runtime.
    pub fn persist_blocking(&self, batch: AppendBatch) -> PersistOutcome {
        let (reply, answer) = oneshot::channel();
        if self.jobs.blocking_send(Job { batch, reply }).is_err() {
            return Err(PersistError::Failed(
                "the store writer has stopped".to_owned(),
            ));
        }
        answer.blocking_recv().unwrap_or_else(|_| {
            Err(PersistError::Failed(
                "the store writer has stopped".to_owned(),
            ))
        })
    }
}

fn write_loop(
    store: &Arc<dyn MetadataStore>,
    mut queue: mpsc::Receiver<Job>,
    compacting: &Arc<AtomicBool>,
) {
    while let Some(first) = queue.blocking_recv() {
        // Everything that queued up while the previous group was being synced goes together.
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let batches: Vec<AppendBatch> = group.iter().map(|j| j.batch.clone()).collect();
        let results = store.append_group(&batches);
        for (job, result) in group.into_iter().zip(results) {
            // A writer that gave up waiting is no reason to stop.
            let _ = job.reply.send(result.map_err(PersistError::from));
        }
        maybe_compact(store, compacting);
    }
}

/// Starts the store's housekeeping (the file store's compaction) on its own thread when it is due
/// and none runs.
fn maybe_compact(store: &Arc<dyn MetadataStore>, compacting: &Arc<AtomicBool>) {
    if !store.maintenance_due() || compacting.swap(true, Ordering::AcqRel) {
        return;
    }
    let (store, flag) = (Arc::clone(store), Arc::clone(compacting));
    let spawned = std::thread::Builder::new()
        .name("portcullis-store-compaction".into())
        .spawn(move || {
            if let Err(e) = store.maintain() {
                tracing::error!(error = %e, "metadata log compaction failed");
            }
            flag.store(false, Ordering::Release);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the compaction thread; will try after the next append");
        compacting.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::credentials::ScramMechanism;
    use portcullis::store::MetadataRecord;
    use portcullis_plugin_stores::FileMetadataStore;

    fn removal(i: usize) -> AppendBatch {
        AppendBatch::new(vec![MetadataRecord::RemoveScramCredential {
            user: format!("u{i}"),
            mechanism: ScramMechanism::Sha256,
        }])
    }

    /// Many connections appending at once share fsyncs: the log is synced far fewer times than
    /// there are appends (one each without group commit).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_are_group_committed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
        let writer = AppendQueue::start(Arc::clone(&store) as Arc<dyn MetadataStore>).unwrap();
        let before = store.stats();
        let tasks: Vec<_> = (0..64)
            .map(|c| {
                let writer = writer.clone();
                tokio::spawn(async move {
                    for i in 0..10 {
                        writer.persist(removal(c * 10 + i)).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let after = store.stats();
        let appends = after.batches - before.batches;
        let syncs = after.log_syncs - before.log_syncs;
        assert_eq!(appends, 640);
        assert!(
            syncs * 4 <= appends,
            "{syncs} log fsyncs for {appends} appends: not group-committed"
        );
        // Every append is in the log, each exactly once.
        assert_eq!(store.snapshot().unwrap().len(), 640);
    }
}
