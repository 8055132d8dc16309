//! The node's store writer: its appends go through the [`AppendQueue`] (one thread,
//! group-committed; see `crate::append_queue`), and, when its store is shared with a cluster
//! (`[store] kind = "kafka"`), it carries the cluster where mutations run.
//!
//! The cluster is attached here rather than the queue knowing it: the cluster itself appends
//! through the queue, so the queue stays free of it.

use std::sync::{Arc, OnceLock};

use portcullis::local::PersistOutcome;
use portcullis::store::{AppendBatch, MetadataStore};

use crate::append_queue::AppendQueue;
use crate::cluster::Cluster;

/// A handle to the writer thread; cheap to clone. The thread ends when every handle is dropped.
#[derive(Clone)]
pub struct StoreWriter {
    appends: AppendQueue,
    /// The node's cluster, when its store is shared (`[store] kind = "kafka"`): mutations run
    /// where the cluster's writer is (see `crate::cluster`).
    cluster: Arc<OnceLock<Arc<Cluster>>>,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter").finish_non_exhaustive()
    }
}

impl StoreWriter {
    /// Starts the writer thread for `store`.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(store: Arc<dyn MetadataStore>) -> std::io::Result<Self> {
        Ok(Self {
            appends: AppendQueue::start(store)?,
            cluster: Arc::new(OnceLock::new()),
        })
    }

    /// The queue the appends go through (what the node's cluster writes with).
    pub fn appends(&self) -> &AppendQueue {
        &self.appends
    }

    /// Attaches the node's cluster (once).
    pub fn attach_cluster(&self, cluster: Arc<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// The node's cluster, when its store is shared.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.get()
    }

    /// Appends `batch` and returns once it is durable and applied to the node's views (or why
    /// not).
    pub async fn persist(&self, batch: AppendBatch) -> PersistOutcome {
        self.appends.persist(batch).await
    }

    /// [`persist`](Self::persist) for threads outside the async runtime.
    pub fn persist_blocking(&self, batch: AppendBatch) -> PersistOutcome {
        self.appends.persist_blocking(batch)
    }
}
