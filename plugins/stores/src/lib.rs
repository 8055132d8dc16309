//! # portcullis-plugin-stores
//!
//! Metadata stores for Portcullis. For now there is one, the embedded store of a single node:
//! [`FileMetadataStore`], a durable, ordered, checksummed log file in the node's data directory
//! (`<data_dir>/metadata.log`) with a commit record beside it (`<data_dir>/metadata.committed`)
//! that says how much of the log was acknowledged. [`apply_record`] and [`credentials_from`] turn
//! its records into the in-memory credential view that SASL mechanisms read.
//!
//! ```no_run
//! use std::sync::Arc;
//! use portcullis::credentials::InMemoryCredentials;
//! use portcullis::store::MetadataStore;
//! use portcullis_plugin_stores::{apply_record, FileMetadataStore};
//!
//! # fn main() -> Result<(), portcullis::store::StoreError> {
//! let store = FileMetadataStore::open("/var/lib/portcullis")?; // Corrupt, Lost or Locked: do not start
//! let creds = Arc::new(InMemoryCredentials::new());
//! let view = Arc::clone(&creds);
//! // Replays the log, then follows every append.
//! store.subscribe(0, Box::new(move |records| {
//!     records.iter().for_each(|r| apply_record(&view, &r.record))
//! }))?;
//! # Ok(()) }
//! ```
//!
//! ## The log format
//!
//! Version 2: a 32-byte header (magic `PCLSMLOG`, version, generation, base length, checksum),
//! then one frame per atomic batch: `length: u32 BE | crc32c(payload): u32 BE | payload`, where
//! the payload is the JSON `{"offset": N, "records": [...]}` (at most [`MAX_BATCH_BYTES`]). Logs of
//! version 1 (earlier builds) are converted when a node opens them for writing.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// The file store's modules do blocking file I/O: a durable store's job is to write and fsync its log
// (the `MetadataStore` contract is synchronous: a change is durable when `append` returns). Each
// such module carries the allowance; everything else in this crate stays under the workspace's ban.
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod commit;
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod compaction;
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod file_store;
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod files;
mod format;
#[doc(hidden)]
pub mod fuzzing;
mod legacy;
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod loss;
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod open;
mod recovery;
mod replay;
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod state;

pub use commit::COMMIT_FILE_NAME;
pub use compaction::{CompactionReport, CompactionStep};
pub use file_store::{FileMetadataStore, ReadOnlyLog, StoreOptions, StoreStats};
pub use files::{COMPACTING_FILE_NAME, DROPPED_FILE_PREFIX, LOCK_FILE_NAME, LOG_FILE_NAME};
pub use format::MAX_BATCH_BYTES;
pub use loss::LossReport;
pub use replay::{apply_record, apply_records, credentials_from, load_credentials};

/// Opens the file store in the node's data directory (registered as the built-in store `file`).
fn open_store(
    settings: &portcullis::registry::StoreSettings,
) -> Result<std::sync::Arc<dyn portcullis::store::MetadataStore>, portcullis::store::StoreError> {
    Ok(std::sync::Arc::new(FileMetadataStore::open(
        &settings.data_dir,
    )?))
}

inventory::submit! {
    portcullis::registry::StoreFactory {
        name: portcullis::registry::DEFAULT_STORE,
        open: open_store,
    }
}
