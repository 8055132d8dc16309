//! The metadata store: a durable, ordered log of security records.

use crate::credentials::{ScramCredential, ScramMechanism};

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
        binding: crate::acl::AclBinding,
    },
    /// An ACL was deleted (KRaft `RemoveAccessControlEntryRecord`).
    RemoveAcl {
        /// The ACL.
        binding: crate::acl::AclBinding,
    },
}

/// The position of a record in the log.
pub type Offset = u64;

/// A durable, ordered log of [`MetadataRecord`]s.
pub trait MetadataStore: Send + Sync {
    /// Appends records atomically; returns once they are durable (fsync'd), with the offset of the
    /// first one.
    fn append(&self, records: &[MetadataRecord]) -> Result<Offset, StoreError>;
    /// Every record in the log, in order.
    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError>;
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
