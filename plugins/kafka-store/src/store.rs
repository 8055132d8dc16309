//! [`KafkaMetadataStore`]: the metadata log in a compacted Kafka topic, shared by the nodes of one
//! cluster.
//!
//! ```text
//!            ┌────────────── every node ──────────────┐
//!  topic ──► │ tail thread: replay, then follow        │──► subscribers (the node's views)
//!            │   (read_committed, partition 0)         │
//!            │ election thread: group member; the one  │
//!            │   assigned the election partition is    │──► the writer: init_transactions
//!            │   the writer                            │    (fences the previous one),
//!            │ status thread: applied offset, role     │    announces itself in the log
//!            └─────────────────────────────────────────┘
//! ```
//!
//! Appends are accepted only on the writer; elsewhere they fail with
//! [`StoreError::NotLeader`] and the host forwards the request to the writer (KIP-590). The
//! writer checks conditions against its own view, which is complete: it is the only writer, it
//! applied everything before its announcement before accepting writes, and it answers an append
//! only once its view has applied it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use portcullis::store::{
    AppendBatch, MetadataRecord, MetadataStore, Offset, RecordKey, StoreError, StoredRecord,
    Subscriber, SubscriptionId,
};

use crate::codec;
use crate::connection::{SaslSettings, TlsSettings};
use crate::settings::KafkaStoreSettings;
use crate::shared::{LeaderInfo, Role, RoleState, Shared};
use crate::topics::{self, Topics};
use crate::upstream::{UpstreamChange, UpstreamError};
use crate::writer::{TxnWriter, WriteError};

/// Where the node is in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The next offset this node will apply (everything before it is applied).
    pub applied: u64,
    /// The latest writer announcement applied.
    pub leader: Option<LeaderInfo>,
    /// This node's role.
    pub role: Role,
}

/// The metadata log in a compacted Kafka topic (see the module documentation).
pub struct KafkaMetadataStore {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl KafkaMetadataStore {
    /// What a reload's `[upstream]` SASL and TLS settings would change for the store's clients,
    /// checked before the reload changes anything (see `upstream.rs`): `None` when
    /// nothing; a new user or password is taken in place, a new mechanism, TLS setting or TLS
    /// file content makes the clients again.
    ///
    /// # Errors
    /// [`UpstreamError`]: a value librdkafka cannot take (the key named, never a password), or
    /// SASL turned on or off (a restart).
    pub fn check_upstream(
        &self,
        sasl: Option<SaslSettings>,
        tls: Option<TlsSettings>,
    ) -> Result<Option<UpstreamChange>, UpstreamError> {
        self.shared
            .upstream
            .check(&self.shared.settings.connection, sasl, tls)
    }

    /// Applies a change [`Self::check_upstream`] accepted. New credentials reach every client in
    /// place: each uses them from its next authentication on (a reconnection, or a
    /// re-authentication when the upstream listener asks for one), and no connection is closed.
    /// Otherwise each client is made again at its thread's next turn (within a second): the
    /// writer steps down and stands for election again.
    pub fn apply_upstream(&self, change: UpstreamChange) {
        let remake = change.remakes_clients();
        // Under the role lock, which a writer being installed holds too: it follows either now
        // or there.
        let role = self.shared.role();
        self.shared.upstream.apply(change);
        if !remake {
            if let RoleState::Writer { writer, .. } = &*role {
                writer.follow_credentials(&self.shared.upstream);
            }
        }
        // The tail and election threads follow at their next turn (100 ms), the status thread
        // at its next report (a second).
    }

    /// Reports `fingerprint` (the configuration this node runs) in the node's status from the
    /// next report on; `portcullis cluster status` shows it per node.
    pub fn set_config_fingerprint(&self, fingerprint: String) {
        *self
            .shared
            .config_fingerprint
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(fingerprint);
    }
}

impl std::fmt::Debug for KafkaMetadataStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaMetadataStore")
            .field("topic", &self.shared.topics.metadata)
            .field("cluster_id", &self.shared.settings.cluster_id)
            .field("node_id", &self.shared.settings.node_id)
            .finish_non_exhaustive()
    }
}

impl KafkaMetadataStore {
    /// Creates the topics if absent, replays the log (returns once the view is at the end of the
    /// log as it was), then follows it; stands for election if the settings say so.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]: the cluster cannot be reached, refuses the topics, or the log
    /// holds another cluster's records.
    pub fn open(settings: KafkaStoreSettings) -> Result<Self, StoreError> {
        settings
            .connection
            .validate()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let topics = Topics::for_log(&settings.topic);
        topics::ensure(&settings.connection, &topics, settings.operation_timeout)
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let shared = Arc::new(Shared::new(settings, topics));
        let store = Self {
            shared: Arc::clone(&shared),
            threads: Mutex::new(Vec::new()),
        };
        store.spawn("portcullis-store-tail", crate::tail::run)?;
        store.wait_replayed()?;
        if shared.settings.elect {
            store.spawn("portcullis-store-election", crate::election::run)?;
        }
        store.spawn("portcullis-store-status", crate::status::publish)?;
        Ok(store)
    }

    fn spawn(&self, name: &str, body: fn(Arc<Shared>)) -> Result<(), StoreError> {
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || body(shared))
            .map_err(|e| StoreError::Unavailable(format!("cannot start {name}: {e}")))?;
        self.threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(handle);
        Ok(())
    }

    fn wait_replayed(&self) -> Result<(), StoreError> {
        let timeout = self.shared.settings.startup_timeout;
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state();
        loop {
            if let Some(failure) = &state.failure {
                let failure = failure.to_string();
                drop(state);
                self.shutdown();
                return Err(StoreError::Unavailable(failure));
            }
            if state.replayed {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                drop(state);
                self.shutdown();
                return Err(StoreError::Unavailable(format!(
                    "the metadata log {} was not replayed within {timeout:?} (is the upstream \
                     cluster reachable?)",
                    self.shared.topics.metadata
                )));
            }
            state = self
                .shared
                .applied
                .wait_timeout(state, (deadline - now).min(Duration::from_millis(500)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Drops the records kept for subscriptions made while the node starts; later subscriptions
    /// must start at [`Progress::applied`] or after.
    pub fn release_startup_cache(&self) {
        self.shared.state().cache = None;
    }

    /// Where the node is in the log, the latest writer, and this node's role.
    pub fn progress(&self) -> Progress {
        let state = self.shared.state();
        Progress {
            applied: state.next_offset,
            leader: state.leader.clone(),
            role: self.shared.role_view(),
        }
    }

    /// Whether this node is the cluster's writer now.
    pub fn is_writer(&self) -> bool {
        self.shared.is_writer()
    }

    /// The latest writer announcement this node has applied.
    pub fn leader(&self) -> Option<LeaderInfo> {
        self.shared.state().leader.clone()
    }

    /// The store's topics.
    pub fn topics(&self) -> &Topics {
        &self.shared.topics
    }

    /// Stops the threads: the node leaves the election group at once (a successor need not wait
    /// for the session timeout) and stops following the log.
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.step_down("the node is stopping");
        let threads: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for thread in threads {
            let _ = thread.join();
        }
    }

    fn writer(&self) -> Option<(u64, Arc<TxnWriter>)> {
        match &*self.shared.role() {
            RoleState::Writer { term, writer } => Some((*term, Arc::clone(writer))),
            _ => None,
        }
    }
}

impl Drop for KafkaMetadataStore {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn not_writer(shared: &Shared) -> StoreError {
    StoreError::NotLeader(format!(
        "node {} is not the writer of cluster {}",
        shared.settings.node_id, shared.settings.cluster_id
    ))
}

impl MetadataStore for KafkaMetadataStore {
    fn append(&self, records: &[MetadataRecord]) -> Result<Offset, StoreError> {
        self.append_batch(&AppendBatch::new(records.to_vec()))
    }

    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError> {
        match &self.shared.state().cache {
            Some(cache) => Ok(cache.values().map(|r| r.record.clone()).collect()),
            None => Err(StoreError::Unsupported(
                "a snapshot after the node started".to_owned(),
            )),
        }
    }

    fn append_batch(&self, batch: &AppendBatch) -> Result<Offset, StoreError> {
        self.append_group(std::slice::from_ref(batch))
            .pop()
            .unwrap_or_else(|| Err(StoreError::Unsupported("an empty group".to_owned())))
    }

    fn append_group(&self, batches: &[AppendBatch]) -> Vec<Result<Offset, StoreError>> {
        let shared = &self.shared;
        let Some((term, writer)) = self.writer() else {
            return batches.iter().map(|_| Err(not_writer(shared))).collect();
        };
        // Conditions, in order, against the view as it will be once the earlier batches of the
        // group are written. The view is complete: this node is the only writer and has applied
        // everything it wrote (see the module documentation).
        const WRITTEN_IN_THIS_GROUP: Offset = Offset::MAX;
        let mut results: Vec<Option<Result<Offset, StoreError>>> = Vec::new();
        let mut messages = Vec::new();
        let mut firsts: Vec<(usize, usize)> = Vec::new(); // (batch, index of its first message)
        let next_offset;
        {
            let state = shared.state();
            next_offset = state.next_offset;
            let mut overlay: HashMap<RecordKey, Option<Offset>> = HashMap::new();
            for (i, batch) in batches.iter().enumerate() {
                let failed = batch.conditions.iter().find(|c| {
                    let current = match overlay.get(c.key()) {
                        Some(latest) => *latest,
                        None => state.live.get(c.key()).copied(),
                    };
                    !c.holds(current)
                });
                if let Some(condition) = failed {
                    results.push(Some(Err(StoreError::Conflict {
                        key: condition.key().clone(),
                    })));
                    continue;
                }
                if batch.records.is_empty() {
                    results.push(Some(Ok(next_offset)));
                    continue;
                }
                firsts.push((i, messages.len()));
                for record in &batch.records {
                    overlay.insert(
                        record.key(),
                        (!record.is_tombstone()).then_some(WRITTEN_IN_THIS_GROUP),
                    );
                    messages.push(codec::encode(record));
                }
                results.push(None);
            }
        }
        if !messages.is_empty() {
            let started = Instant::now();
            match writer.write(&messages, Some(term)) {
                Ok(offsets) => {
                    let written = started.elapsed();
                    let last = offsets.iter().copied().max().unwrap_or(0).max(0) as u64;
                    let applied = shared.wait_applied(last, shared.settings.operation_timeout);
                    tracing::debug!(
                        messages = messages.len(),
                        write_us = written.as_micros() as u64,
                        applied_us = (started.elapsed() - written).as_micros() as u64,
                        "metadata group written"
                    );
                    for (batch, first) in firsts {
                        let offset = offsets.get(first).copied().unwrap_or(0).max(0) as u64;
                        if let Some(slot) = results.get_mut(batch) {
                            *slot = Some(match &applied {
                                Ok(()) => Ok(offset),
                                Err(e) => Err(StoreError::Unavailable(e.to_string())),
                            });
                        }
                    }
                }
                Err(WriteError::Fenced(reason)) => {
                    shared.fenced(term, &format!("fenced: {reason}"));
                    for (batch, _) in firsts {
                        if let Some(slot) = results.get_mut(batch) {
                            *slot = Some(Err(not_writer(shared)));
                        }
                    }
                }
                Err(WriteError::Failed(reason)) => {
                    tracing::warn!(%reason, "a metadata write was aborted");
                    for (batch, _) in firsts {
                        if let Some(slot) = results.get_mut(batch) {
                            *slot = Some(Err(StoreError::Unavailable(reason.to_string())));
                        }
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::Unavailable("not written".to_owned()))))
            .collect()
    }

    fn subscribe(
        &self,
        from: Offset,
        mut subscriber: Subscriber,
    ) -> Result<SubscriptionId, StoreError> {
        let mut state = self.shared.state();
        match &state.cache {
            Some(cache) => {
                let replay: Vec<StoredRecord> =
                    cache.range(from..).map(|(_, r)| r.clone()).collect();
                subscriber(&replay);
            }
            None if from < state.next_offset => {
                return Err(StoreError::Unsupported(format!(
                    "a subscription from offset {from} after the node started (applied up to {})",
                    state.next_offset
                )))
            }
            None => {}
        }
        let id = SubscriptionId(state.next_subscription);
        state.next_subscription += 1;
        state.subscribers.push((id, subscriber));
        Ok(id)
    }

    fn unsubscribe(&self, id: SubscriptionId) {
        self.shared.state().subscribers.retain(|(s, _)| *s != id);
    }

    fn location(&self) -> String {
        format!("topic {}", self.topics().metadata)
    }

    fn replay_done(&self) {
        self.release_startup_cache();
    }
}
