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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use portcullis::store::{
    AppendBatch, MetadataRecord, MetadataStore, Offset, RecordKey, StoreError, StoredRecord,
    Subscriber, SubscriptionId,
};

use crate::codec::{self, LeaderAnnouncement};
use crate::connection::KafkaConnection;
use crate::tail::TailError;
use crate::topics::{self, Topics};
use crate::writer::{TxnWriter, WriteError, WriterStartError};

/// How a node uses the store.
#[derive(Clone, Debug)]
pub struct KafkaStoreSettings {
    /// How to reach the upstream cluster.
    pub connection: KafkaConnection,
    /// The metadata log's topic.
    pub topic: String,
    /// Nodes with the same cluster id share the log and elect one writer.
    pub cluster_id: String,
    /// This node's id (headers, status, client ids).
    pub node_id: i32,
    /// Where peers reach this node's inter-node listener (announced when it becomes the writer).
    pub advertised_address: String,
    /// The election group's session timeout: how long a writer that stopped heartbeating (killed,
    /// paused, cut off) keeps the partition before another node is elected.
    pub session_timeout: Duration,
    /// Bound on each cluster operation (topic creation, transactions).
    pub operation_timeout: Duration,
    /// Bound on the replay at start.
    pub startup_timeout: Duration,
    /// Whether this node stands for election (tools that only read do not).
    pub elect: bool,
}

impl KafkaStoreSettings {
    /// Settings with the defaults: 6 s session timeout (Kafka's smallest by default), 10 s
    /// operations, 120 s start-up, standing for election.
    pub fn new(
        connection: KafkaConnection,
        topic: impl Into<String>,
        cluster_id: impl Into<String>,
        node_id: i32,
        advertised_address: impl Into<String>,
    ) -> Self {
        Self {
            connection,
            topic: topic.into(),
            cluster_id: cluster_id.into(),
            node_id,
            advertised_address: advertised_address.into(),
            session_timeout: Duration::from_secs(6),
            operation_timeout: Duration::from_secs(10),
            startup_timeout: Duration::from_secs(120),
            elect: true,
        }
    }
}

/// The latest writer announcement in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The writer's term: the offset of its announcement (later announcements have higher ones).
    pub term: u64,
    /// Its node id.
    pub node_id: i32,
    /// Its inter-node listener.
    pub address: String,
}

/// What this node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not the writer.
    Follower,
    /// Elected; fencing the previous writer and catching up.
    Activating,
    /// The writer, since its announcement at `term`.
    Writer {
        /// The offset of its announcement.
        term: u64,
    },
}

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

pub(crate) struct State {
    /// The next offset to apply.
    pub(crate) next_offset: u64,
    /// The offset of each key's latest live record.
    pub(crate) live: HashMap<RecordKey, Offset>,
    /// The live records, while the node starts (subscriptions from offset 0 replay from it).
    pub(crate) cache: Option<BTreeMap<Offset, StoredRecord>>,
    pub(crate) subscribers: Vec<(SubscriptionId, Subscriber)>,
    pub(crate) next_subscription: u64,
    pub(crate) leader: Option<LeaderInfo>,
    /// The replay reached the end of the log as it was at start.
    pub(crate) replayed: bool,
    /// The tail stopped for good (a foreign record at start); why.
    pub(crate) failure: Option<Arc<TailError>>,
}

/// Why a written offset is not (yet) in this node's view.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AppliedError {
    /// The tail did not apply it in time.
    #[error("offset {offset} was written but not applied within {timeout:?}")]
    NotApplied {
        /// The offset written.
        offset: u64,
        /// How long the node waited.
        timeout: Duration,
    },
    /// The tail stopped for good.
    #[error(transparent)]
    TailStopped(Arc<TailError>),
}

/// Why an elected node cannot take over as the writer (it stays a follower, and tries again).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActivateError {
    /// The fencing producer cannot be opened.
    #[error(transparent)]
    Start(#[from] WriterStartError),
    /// The announcement could not be written.
    #[error("cannot announce the new writer: {0}")]
    Announce(WriteError),
    /// The announcement was written but this node's view did not reach it.
    #[error(transparent)]
    Applied(#[from] AppliedError),
}

enum RoleState {
    Follower,
    Activating,
    Writer { term: u64, writer: Arc<TxnWriter> },
}

/// What the store's threads share.
pub(crate) struct Shared {
    pub(crate) settings: KafkaStoreSettings,
    pub(crate) topics: Topics,
    state: Mutex<State>,
    /// Signalled whenever the tail applied something or stopped.
    applied: Condvar,
    role: Mutex<RoleState>,
    pub(crate) stop: AtomicBool,
    /// Set when the writer was fenced while the group still assigns it the partition: the
    /// election thread leaves the group and joins again, so the group decides afresh.
    pub(crate) rejoin: AtomicBool,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn role(&self) -> MutexGuard<'_, RoleState> {
        self.role.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn notify_applied(&self) {
        self.applied.notify_all();
    }

    /// Waits until every offset up to `offset` is applied, or `timeout`.
    fn wait_applied(&self, offset: u64, timeout: Duration) -> Result<(), AppliedError> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        while state.next_offset <= offset {
            if let Some(failure) = &state.failure {
                return Err(AppliedError::TailStopped(Arc::clone(failure)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(AppliedError::NotApplied { offset, timeout });
            }
            state = self
                .applied
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    pub(crate) fn is_writer(&self) -> bool {
        matches!(*self.role(), RoleState::Writer { .. })
    }

    pub(crate) fn role_view(&self) -> Role {
        match &*self.role() {
            RoleState::Follower => Role::Follower,
            RoleState::Activating => Role::Activating,
            RoleState::Writer { term, .. } => Role::Writer { term: *term },
        }
    }

    /// Becomes the writer: fences the previous one, announces itself, and waits until its view
    /// has applied everything up to the announcement. `Ok(false)`: not now, because this node was
    /// fenced and must rejoin the election group first ([`Shared::fenced`]).
    pub(crate) fn activate(&self) -> Result<bool, ActivateError> {
        {
            let mut role = self.role();
            // Checked under the role lock that `fenced` holds while it sets the flag: the
            // assignment the election thread saw may be the one from before this node was paused,
            // and activating on it would fence the node the group elected meanwhile.
            if self.rejoin.load(Ordering::Acquire) {
                return Ok(false);
            }
            *role = RoleState::Activating;
        }
        let settings = &self.settings;
        let started = Instant::now();
        let result = TxnWriter::start(
            &settings.connection,
            &self.topics.metadata,
            &settings.cluster_id,
            settings.node_id,
            settings.operation_timeout,
        )
        .map_err(ActivateError::from)
        .and_then(|writer| {
            let (key, value) = codec::encode_leader(&LeaderAnnouncement {
                node_id: settings.node_id,
                address: settings.advertised_address.clone(),
            });
            let offsets = writer
                .write(&[(key, Some(value))], None)
                .map_err(ActivateError::Announce)?;
            let term = offsets.first().copied().unwrap_or(0).max(0) as u64;
            self.wait_applied(term, settings.operation_timeout)?;
            Ok((term, writer))
        });
        match result {
            Ok((term, writer)) => {
                *self.role() = RoleState::Writer {
                    term,
                    writer: Arc::new(writer),
                };
                tracing::info!(
                    term,
                    took_ms = started.elapsed().as_millis() as u64,
                    "this node is the cluster's metadata writer"
                );
                Ok(true)
            }
            Err(e) => {
                *self.role() = RoleState::Follower;
                Err(e)
            }
        }
    }

    /// Stops writing (the group took the partition away, or the node is stopping).
    pub(crate) fn step_down(&self, reason: &str) {
        let mut role = self.role();
        Self::leave_role(&mut role, reason);
    }

    /// Stops writing because a newer writer fenced this one, and has the election thread leave
    /// the group before it may activate again: the group assignment it holds may be stale (a
    /// paused node learns that it lost the partition only after it resumes). The flag is set
    /// under the role lock, before the role changes, so `activate` cannot see the role without it.
    pub(crate) fn fenced(&self, reason: &str) {
        let mut role = self.role();
        self.rejoin.store(true, Ordering::Release);
        Self::leave_role(&mut role, reason);
    }

    fn leave_role(role: &mut RoleState, reason: &str) {
        if !matches!(*role, RoleState::Follower) {
            tracing::warn!(
                reason,
                "this node is no longer the cluster's metadata writer"
            );
        }
        *role = RoleState::Follower;
    }
}

/// The metadata log in a compacted Kafka topic (see the module documentation).
pub struct KafkaMetadataStore {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
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
        let shared = Arc::new(Shared {
            topics,
            state: Mutex::new(State {
                next_offset: 0,
                live: HashMap::new(),
                cache: Some(BTreeMap::new()),
                subscribers: Vec::new(),
                next_subscription: 0,
                leader: None,
                replayed: false,
                failure: None,
            }),
            applied: Condvar::new(),
            role: Mutex::new(RoleState::Follower),
            stop: AtomicBool::new(false),
            rejoin: AtomicBool::new(false),
            settings,
        });
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
                    shared.fenced(&format!("fenced: {reason}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_errors_keep_their_messages() {
        let late = ActivateError::from(AppliedError::NotApplied {
            offset: 5,
            timeout: Duration::from_secs(10),
        });
        assert_eq!(
            late.to_string(),
            "offset 5 was written but not applied within 10s"
        );
        let stopped = AppliedError::TailStopped(Arc::new(TailError::Undecodable {
            offset: 0,
            error: codec::DecodeError::KeyMismatch,
        }));
        assert_eq!(
            stopped.to_string(),
            "offset 0: a record whose key does not match its message key"
        );
        let announce =
            ActivateError::Announce(WriteError::Failed(crate::writer::TxnError::NotAcknowledged));
        assert_eq!(
            announce.to_string(),
            "cannot announce the new writer: the brokers did not acknowledge the write in time"
        );
    }
}
