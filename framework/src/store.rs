//! The metadata store: a durable, ordered log of security records, and the contract every node's
//! state is derived from.
//!
//! Credentials, ACLs and delegation tokens are *views* of this log: a node's in-memory state is
//! whatever it has applied, and a write is visible when its record is applied. The same shape
//! serves the embedded file store of one node and a log shared by several nodes (a compacted Kafka
//! topic), so records are designed for compaction:
//!
//! - every record is *about* something, its [`RecordKey`]: a user's credential for one mechanism,
//!   one ACL binding, one delegation token. The latest record of a key is its state;
//! - a deletion is a *tombstone* for its key ([`MetadataRecord::is_tombstone`]); compaction may drop
//!   every record of a key but its latest, and a tombstone once nothing older remains;
//! - offsets are stable: compaction removes records, it never renumbers the ones it keeps.
//!
//! In a Kafka topic the key is [`RecordKey::encode`], the value the record (`null` for a
//! tombstone, which [`RecordKey::tombstone`] turns back into the removal record).

use crate::acl::AclBinding;
use crate::credentials::{ScramCredential, ScramMechanism};

pub mod memory;

/// One security record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum MetadataRecord {
    /// A SCRAM credential was set (KRaft `UserScramCredentialRecord`).
    ScramCredential {
        /// The user name.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
        /// The credential.
        credential: ScramCredential,
    },
    /// A SCRAM credential was removed (KRaft `RemoveUserScramCredentialRecord`).
    RemoveScramCredential {
        /// The user name.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
    /// An ACL was created (KRaft `AccessControlEntryRecord`).
    Acl {
        /// The ACL.
        binding: AclBinding,
    },
    /// An ACL was deleted (KRaft `RemoveAccessControlEntryRecord`).
    RemoveAcl {
        /// The ACL.
        binding: AclBinding,
    },
    /// A delegation token was created, renewed or had its expiry changed (KRaft
    /// `DelegationTokenRecord`). Never carries the HMAC: every node recomputes it from the id and
    /// the shared secret.
    DelegationToken(DelegationTokenRecord),
    /// A delegation token was expired or swept (KRaft `RemoveDelegationTokenRecord`).
    RemoveDelegationToken {
        /// The token id.
        token_id: String,
    },
    /// A forwarded mutation was applied (this record is written in the same atomic batch as the
    /// mutation's records), or its answer was recorded (a later record of the same key with
    /// `response`). The cluster's writer answers a retry of the same request from it instead of
    /// applying the mutation again (`local::forwarded::dedup`).
    ForwardedRequest(ForwardedRequestRecord),
    /// A forwarded mutation's record, dropped once no retry of it can arrive any more.
    RemoveForwardedRequest {
        /// The request id.
        request_id: String,
    },
}

/// A forwarded mutation that was applied, and its answer once recorded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForwardedRequestRecord {
    /// The request id ([`crate::local::forwarded::RequestId`]).
    pub request_id: String,
    /// The client id of the client that sent it (for diagnosis only; cut to 64 characters).
    pub client_id: String,
    /// When the writer applied it (ms since the epoch, the writer's clock): it is tombstoned a
    /// retention later.
    pub applied_ms: i64,
    /// SHA-256 (hex) of the forwarded principal and the client's request: a retry must match it.
    #[serde(default)]
    pub fingerprint: String,
    /// The response frame the client got (header and body), once recorded. A
    /// CreateDelegationToken response is recorded without its HMAC.
    #[serde(default, with = "base64_bytes")]
    pub response: Option<Vec<u8>>,
}

/// Bytes as base64 text in the JSON form of records (a JSON array of numbers is four times
/// larger).
mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    const ENGINE: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

    pub(super) fn serialize<S: Serializer>(
        bytes: &Option<Vec<u8>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => serializer.serialize_some(&ENGINE.encode(b)),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| ENGINE.decode(text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// A delegation token's state as stored (Kafka's `TokenInformation` without the HMAC).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DelegationTokenRecord {
    /// The token id (22 characters, Kafka's `Uuid` string form).
    pub token_id: String,
    /// The owner, `type:name`.
    pub owner: String,
    /// Who asked for the token (KIP-373), `type:name`.
    pub requester: String,
    /// Who may renew and expire it besides the owner, each `type:name`.
    pub renewers: Vec<String>,
    /// When it was issued (ms since the epoch).
    pub issue_timestamp_ms: i64,
    /// The latest time it can be renewed to.
    pub max_timestamp_ms: i64,
    /// When it expires unless renewed.
    pub expiry_timestamp_ms: i64,
}

/// What a record is about: its compaction key. Two records with the same key describe the same
/// thing, and the later one wins.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum RecordKey {
    /// A user's credential for one mechanism.
    ScramCredential {
        /// The user name.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
    /// One ACL binding (an ACL either exists or not: its key is all of it).
    Acl {
        /// The ACL.
        binding: AclBinding,
    },
    /// One delegation token.
    DelegationToken {
        /// The token id.
        token_id: String,
    },
    /// One forwarded mutation's record.
    ForwardedRequest {
        /// The request id.
        request_id: String,
    },
}

impl RecordKey {
    /// The key's stable byte form (JSON), for stores that key records externally, such as a
    /// compacted Kafka topic.
    pub fn encode(&self) -> Vec<u8> {
        // Serializing these plain data types cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses [`RecordKey::encode`]'s output.
    ///
    /// # Errors
    /// The bytes are not an encoded key.
    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The removal record for this key.
    pub fn tombstone(&self) -> MetadataRecord {
        match self {
            RecordKey::ScramCredential { user, mechanism } => {
                MetadataRecord::RemoveScramCredential {
                    user: user.clone(),
                    mechanism: *mechanism,
                }
            }
            RecordKey::Acl { binding } => MetadataRecord::RemoveAcl {
                binding: binding.clone(),
            },
            RecordKey::DelegationToken { token_id } => MetadataRecord::RemoveDelegationToken {
                token_id: token_id.clone(),
            },
            RecordKey::ForwardedRequest { request_id } => MetadataRecord::RemoveForwardedRequest {
                request_id: request_id.clone(),
            },
        }
    }
}

impl MetadataRecord {
    /// What the record is about.
    pub fn key(&self) -> RecordKey {
        match self {
            MetadataRecord::ScramCredential {
                user, mechanism, ..
            }
            | MetadataRecord::RemoveScramCredential { user, mechanism } => {
                RecordKey::ScramCredential {
                    user: user.clone(),
                    mechanism: *mechanism,
                }
            }
            MetadataRecord::Acl { binding } | MetadataRecord::RemoveAcl { binding } => {
                RecordKey::Acl {
                    binding: binding.clone(),
                }
            }
            MetadataRecord::DelegationToken(token) => RecordKey::DelegationToken {
                token_id: token.token_id.clone(),
            },
            MetadataRecord::RemoveDelegationToken { token_id } => RecordKey::DelegationToken {
                token_id: token_id.clone(),
            },
            MetadataRecord::ForwardedRequest(ForwardedRequestRecord { request_id, .. })
            | MetadataRecord::RemoveForwardedRequest { request_id } => {
                RecordKey::ForwardedRequest {
                    request_id: request_id.clone(),
                }
            }
        }
    }

    /// Whether the record deletes its key.
    pub fn is_tombstone(&self) -> bool {
        matches!(
            self,
            MetadataRecord::RemoveScramCredential { .. }
                | MetadataRecord::RemoveAcl { .. }
                | MetadataRecord::RemoveDelegationToken { .. }
                | MetadataRecord::RemoveForwardedRequest { .. }
        )
    }
}

impl From<crate::authorizer::AclChange> for MetadataRecord {
    fn from(change: crate::authorizer::AclChange) -> Self {
        match change {
            crate::authorizer::AclChange::Create(binding) => MetadataRecord::Acl { binding },
            crate::authorizer::AclChange::Delete(binding) => MetadataRecord::RemoveAcl { binding },
        }
    }
}

/// The position of a record in the log. Offsets only grow, and compaction keeps them.
pub type Offset = u64;

/// A record and its offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// Where it is in the log.
    pub offset: Offset,
    /// The record.
    pub record: MetadataRecord,
}

/// A precondition of an append (optimistic concurrency): the append happens only if every one
/// holds when it is written, so a decision taken on a view that has since moved on is not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Condition {
    /// The latest live record of `key` is at `offset` (`None`: the key has no live record — it
    /// never existed, or its latest record is a tombstone).
    Latest {
        /// The key.
        key: RecordKey,
        /// The offset its latest live record must have.
        offset: Option<Offset>,
    },
    /// `key` has a live record, whatever its offset (its latest record is not a tombstone). A
    /// deletion decided on a view carries it, so that of two deletions decided on the same view
    /// only the first is written and reported (the second is decided again, and finds nothing).
    Live {
        /// The key.
        key: RecordKey,
    },
}

impl Condition {
    /// The key the condition is about.
    pub fn key(&self) -> &RecordKey {
        match self {
            Condition::Latest { key, .. } | Condition::Live { key } => key,
        }
    }

    /// Whether the condition holds when the key's latest live record is at `current` (`None`:
    /// no live record). Every store evaluates conditions through this, so a new kind of
    /// condition cannot be silently ignored by one of them.
    pub fn holds(&self, current: Option<Offset>) -> bool {
        match self {
            Condition::Latest { offset, .. } => current == *offset,
            Condition::Live { .. } => current.is_some(),
        }
    }
}

/// One atomic append: all of its records or none, and only if its conditions hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppendBatch {
    /// The records, in order.
    pub records: Vec<MetadataRecord>,
    /// What must hold for them to be written.
    pub conditions: Vec<Condition>,
}

impl AppendBatch {
    /// A batch without conditions.
    pub fn new(records: Vec<MetadataRecord>) -> Self {
        Self {
            records,
            conditions: Vec::new(),
        }
    }

    /// Adds conditions.
    pub fn with_conditions(mut self, conditions: Vec<Condition>) -> Self {
        self.conditions = conditions;
        self
    }
}

/// Receives records in log order: first the replay, then every record appended later. It is
/// called before the append that wrote the records returns, so a view fed by it has applied a
/// write by the time the writer hears it succeeded.
pub type Subscriber = Box<dyn FnMut(&[StoredRecord]) + Send>;

/// Identifies a subscription, to end it with [`MetadataStore::unsubscribe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubscriptionId(pub u64);

/// A durable, ordered log of [`MetadataRecord`]s.
///
/// `append` and `snapshot` are all a store must have; the provided methods give conditional
/// appends, group commit and subscriptions a simple meaning on top of them. A store a node runs on
/// must override [`subscribe`](MetadataStore::subscribe) (the default replays what is there and
/// does not follow later appends), and [`append_batch`](MetadataStore::append_batch) to support
/// conditions.
pub trait MetadataStore: Send + Sync {
    /// Appends records atomically; returns once they are durable (and, for a store with
    /// subscriptions, handed to every subscriber), with the offset of the first one.
    ///
    /// # Errors
    /// Why the write failed.
    fn append(&self, records: &[MetadataRecord]) -> Result<Offset, StoreError>;

    /// Every record in the log, in order (after compaction: at least the latest record of each
    /// key, in offset order).
    ///
    /// # Errors
    /// The log could not be read.
    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError>;

    /// Appends one batch atomically if its conditions hold (see [`MetadataStore::append`]).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when a condition does not hold (nothing was written), or why the
    /// write failed. The default supports no conditions.
    fn append_batch(&self, batch: &AppendBatch) -> Result<Offset, StoreError> {
        if !batch.conditions.is_empty() {
            return Err(StoreError::Unsupported("conditional appends".to_owned()));
        }
        self.append(&batch.records)
    }

    /// Appends several batches, each atomic and conditional on its own; one result per batch, in
    /// order. A store that can make them durable together (group commit: one fsync for all)
    /// should; the default appends them one by one.
    fn append_group(&self, batches: &[AppendBatch]) -> Vec<Result<Offset, StoreError>> {
        batches.iter().map(|b| self.append_batch(b)).collect()
    }

    /// Hands `subscriber` every record from offset `from` on (records compaction removed are
    /// skipped), then every record appended later, in log order, each before the append that
    /// wrote it returns, until it is unsubscribed.
    ///
    /// The default only replays [`snapshot`](MetadataStore::snapshot) (offsets counted from 0)
    /// and never calls the subscriber again: enough for a store that is never appended to (a
    /// benchmark corpus), not for one a node runs on.
    ///
    /// # Errors
    /// The log could not be read.
    fn subscribe(
        &self,
        from: Offset,
        mut subscriber: Subscriber,
    ) -> Result<SubscriptionId, StoreError> {
        let records: Vec<StoredRecord> = self
            .snapshot()?
            .into_iter()
            .enumerate()
            .map(|(i, record)| StoredRecord {
                offset: i as Offset,
                record,
            })
            .filter(|r| r.offset >= from)
            .collect();
        subscriber(&records);
        Ok(SubscriptionId(u64::MAX))
    }

    /// Ends a subscription; unknown ids are ignored.
    fn unsubscribe(&self, id: SubscriptionId) {
        let _ = id;
    }

    /// Where the store keeps its data, for messages (a directory, a topic).
    fn location(&self) -> String {
        String::new()
    }

    /// Called once every view of the node has replayed the log at start: whatever the store kept
    /// to serve that replay may go.
    fn replay_done(&self) {}

    /// Whether housekeeping is due (compaction of a log whose dead records outnumber the live
    /// ones). Asked by the store's writer after each group of appends.
    fn maintenance_due(&self) -> bool {
        false
    }

    /// Does the housekeeping (on a thread of its own: it may take a while); appends may continue
    /// meanwhile.
    ///
    /// # Errors
    /// Why it failed (the store stays usable as it was).
    fn maintain(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A metadata store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The log is damaged; the node refuses to start on it.
    #[error("metadata log {path} is corrupt at byte offset {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The log holds less than was acknowledged: records a client was told are durable are gone.
    #[error(
        "metadata log {path} is shorter than what was acknowledged ({found} of {committed} bytes): \
         acknowledged records are missing; the node refuses to start (see docs/configuration.md, \
         \"Recovering the metadata store\")"
    )]
    Lost {
        /// The file.
        path: String,
        /// The committed length recorded when the last write was acknowledged.
        committed: u64,
        /// What the file holds.
        found: u64,
    },
    /// A condition of the append did not hold; nothing was written.
    #[error("append condition failed for {key:?}")]
    Conflict {
        /// The key whose latest record was not the expected one.
        key: RecordKey,
    },
    /// The store cannot do what was asked.
    #[error("the metadata store does not support {0}")]
    Unsupported(String),
    /// The store cannot be reached (a shared store's cluster is down or refuses the node); what
    /// is wrong, for logs.
    #[error("the metadata store is unavailable: {0}")]
    Unavailable(String),
    /// The store is shared by a cluster and this node is not (or no longer) its writer; nothing
    /// was written.
    #[error("this node is not the metadata writer of its cluster: {0}")]
    NotLeader(String),
    /// Another process holds the data directory.
    #[error("data directory {0} is in use by another Portcullis process")]
    Locked(String),
    /// An I/O error.
    #[error("metadata store I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removals_are_tombstones_of_the_same_key() {
        let set = MetadataRecord::ScramCredential {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha256,
            credential: ScramCredential {
                salt: vec![1],
                stored_key: vec![2],
                server_key: vec![3],
                iterations: 4096,
            },
        };
        let key = set.key();
        assert!(!set.is_tombstone());
        let removal = key.tombstone();
        assert!(removal.is_tombstone());
        assert_eq!(removal.key(), key);
        assert_eq!(RecordKey::decode(&key.encode()).unwrap(), key);

        let token = MetadataRecord::DelegationToken(DelegationTokenRecord {
            token_id: "t".into(),
            owner: "User:a".into(),
            requester: "User:a".into(),
            renewers: vec![],
            issue_timestamp_ms: 1,
            max_timestamp_ms: 3,
            expiry_timestamp_ms: 2,
        });
        assert_eq!(
            token.key().tombstone(),
            MetadataRecord::RemoveDelegationToken {
                token_id: "t".into()
            }
        );
    }

    #[test]
    fn forwarded_request_records_round_trip_with_their_response_in_base64() {
        let record = MetadataRecord::ForwardedRequest(ForwardedRequestRecord {
            request_id: "2-00ab-7".into(),
            client_id: "adminclient-1".into(),
            applied_ms: 5,
            fingerprint: "ab".into(),
            response: Some(vec![0, 1, 255]),
        });
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains(r#""response":"AAH/""#), "{json}");
        assert_eq!(
            serde_json::from_str::<MetadataRecord>(&json).unwrap(),
            record
        );
        let marker =
            r#"{"type":"ForwardedRequest","request_id":"a","client_id":"","applied_ms":1}"#;
        let MetadataRecord::ForwardedRequest(marker) = serde_json::from_str(marker).unwrap() else {
            panic!("not a forwarded request")
        };
        assert_eq!(marker.response, None);
        let key = record.key();
        assert_eq!(RecordKey::decode(&key.encode()).unwrap(), key);
        assert!(key.tombstone().is_tombstone());
        assert_eq!(key.tombstone().key(), key);
        assert!(!record.is_tombstone());
        let bad = r#"{"type":"ForwardedRequest","request_id":"a","client_id":"","applied_ms":1,"response":"!"}"#;
        assert!(serde_json::from_str::<MetadataRecord>(bad).is_err());
    }

    #[test]
    fn keys_of_different_things_differ() {
        let a = RecordKey::ScramCredential {
            user: "a".into(),
            mechanism: ScramMechanism::Sha256,
        };
        let b = RecordKey::ScramCredential {
            user: "a".into(),
            mechanism: ScramMechanism::Sha512,
        };
        let t = RecordKey::DelegationToken {
            token_id: "a".into(),
        };
        assert_ne!(a.encode(), b.encode());
        assert_ne!(a.encode(), t.encode());
    }
}
