//! What the store's threads share ([`Shared`]): the node's view of the log ([`State`]), its role,
//! and becoming and leaving the writer. The tail, election and status threads and the store's
//! handle each hold it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use portcullis::store::{Offset, RecordKey, StoredRecord, Subscriber, SubscriptionId};

use crate::codec::{self, LeaderAnnouncement};
use crate::connection::KafkaConnection;
use crate::settings::KafkaStoreSettings;
use crate::tail_error::TailError;
use crate::topics::Topics;
use crate::upstream::{Generation, Upstream};
use crate::writer::{TxnWriter, WriteError, WriterStartError};

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

pub(crate) enum RoleState {
    Follower,
    Activating,
    Writer { term: u64, writer: Arc<TxnWriter> },
}

/// What the store's threads share.
pub(crate) struct Shared {
    pub(crate) settings: KafkaStoreSettings,
    pub(crate) topics: Topics,
    pub(crate) state: Mutex<State>,
    /// Signalled whenever the tail applied something or stopped.
    pub(crate) applied: Condvar,
    pub(crate) role: Mutex<RoleState>,
    pub(crate) stop: AtomicBool,
    /// Set when the writer was fenced while the group still assigns it the partition: the
    /// election thread leaves the group and joins again, so the group decides afresh.
    pub(crate) rejoin: AtomicBool,
    /// The fingerprint of the configuration the node runs (the host sets it at start and after
    /// each applied reload), reported with the node's status so an operator sees drift.
    pub(crate) config_fingerprint: Mutex<Option<String>>,
    /// How the clients log in upstream now (a reload may change it, see [`crate::upstream`]).
    pub(crate) upstream: Upstream,
}

impl Shared {
    /// A node's shared part before its threads start: an empty view (the replay fills it, and
    /// keeps the live records for subscriptions made while the node starts), a follower.
    pub(crate) fn new(settings: KafkaStoreSettings, topics: Topics) -> Self {
        Self {
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
            config_fingerprint: Mutex::new(None),
            upstream: Upstream::new(
                settings.connection.sasl.clone(),
                settings.connection.tls.clone(),
            ),
            settings,
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn role(&self) -> MutexGuard<'_, RoleState> {
        self.role.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How a client made now reaches the upstream: the settings, with the login of the moment
    /// and its generation (see [`crate::upstream`]).
    pub(crate) fn connection(&self) -> (Generation, KafkaConnection) {
        let (generation, sasl, tls) = self.upstream.current();
        let mut connection = self.settings.connection.clone();
        connection.sasl = sasl;
        connection.tls = tls;
        (generation, connection)
    }

    pub(crate) fn notify_applied(&self) {
        self.applied.notify_all();
    }

    /// Waits until every offset up to `offset` is applied, or `timeout`.
    pub(crate) fn wait_applied(&self, offset: u64, timeout: Duration) -> Result<(), AppliedError> {
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
        let (generation, connection) = self.connection();
        let result = TxnWriter::start(
            &connection,
            generation,
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
                let mut role = self.role();
                // Credentials a reload replaced while the writer started (under the role lock,
                // which the replacement holds too: none is missed).
                writer.follow_credentials(&self.upstream);
                *role = RoleState::Writer {
                    term,
                    writer: Arc::new(writer),
                };
                drop(role);
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
    ///
    /// `term` is the term of the writer whose write was fenced: when this node is already
    /// activating or writing under a newer term (it stepped down and was elected again, and its
    /// new producer fenced the old one), there is nothing to leave.
    pub(crate) fn fenced(&self, term: u64, reason: &str) {
        let mut role = self.role();
        match &*role {
            RoleState::Writer { term: now, .. } if *now != term => return,
            RoleState::Activating => return,
            _ => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        let connection = KafkaConnection {
            bootstrap_servers: vec!["127.0.0.1:9".into()],
            security_protocol: "PLAINTEXT".into(),
            sasl: None,
            tls: None,
        };
        let settings = KafkaStoreSettings::new(connection, "__log", "c1", 1, "127.0.0.1:9");
        Shared::new(settings, Topics::for_log("__log"))
    }

    #[test]
    fn a_fence_of_an_older_write_leaves_an_activation_alone_and_makes_a_follower_rejoin() {
        let shared = shared();
        *shared.role() = RoleState::Activating;
        shared.fenced(3, "fenced by this node's own new producer");
        assert!(matches!(*shared.role(), RoleState::Activating));
        assert!(!shared.rejoin.load(Ordering::Acquire));
        *shared.role() = RoleState::Follower;
        shared.fenced(3, "fenced by another node");
        assert!(shared.rejoin.load(Ordering::Acquire));
    }

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
