//! # portcullis-plugin-stores
//!
//! Metadata stores for Portcullis. For now there is one, the embedded store of a single node:
//! [`FileMetadataStore`], a durable, ordered, checksummed log file in the node's data directory
//! (`<data_dir>/metadata.log`). [`load_credentials`] and [`apply_record`] turn its records into
//! the in-memory credential view that SASL mechanisms read.
//!
//! ```no_run
//! use std::sync::Arc;
//! use portcullis::credentials::InMemoryCredentials;
//! use portcullis_plugin_stores::{apply_record, load_credentials, FileMetadataStore};
//!
//! # fn main() -> Result<(), portcullis::store::StoreError> {
//! let store = FileMetadataStore::open("/var/lib/portcullis")?; // Corrupt or Locked: do not start
//! let creds = Arc::new(InMemoryCredentials::new());
//! load_credentials(&store, &creds)?;
//! let view = Arc::clone(&creds);
//! store.add_listener(Box::new(move |record| apply_record(&view, record)));
//! # Ok(()) }
//! ```
//!
//! ## The log format
//!
//! A 12-byte header (magic `PCLSMLOG`, format version `1` as a big-endian `u32`), then one frame
//! per `append` call: `length: u32 BE | crc32c(payload): u32 BE | payload`, where the payload is
//! the JSON array of that call's records (at most [`MAX_BATCH_BYTES`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

mod file_store;
mod format;
mod replay;

pub use file_store::{FileMetadataStore, Listener, LOCK_FILE_NAME, LOG_FILE_NAME};
pub use format::MAX_BATCH_BYTES;
pub use replay::{apply_record, load_credentials};
