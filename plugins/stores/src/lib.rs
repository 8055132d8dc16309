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
#![deny(missing_docs)]

// The one module of the plugins allowed blocking file I/O: a durable store's job is to write and
// fsync its log (the `MetadataStore` contract is synchronous: a change is durable when `append`
// returns). Everything else in this crate stays under the workspace's ban.
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the file store's job is file I/O"
)]
mod file_store;
mod format;
mod replay;

pub use file_store::{FileMetadataStore, Listener, LOCK_FILE_NAME, LOG_FILE_NAME};
pub use format::MAX_BATCH_BYTES;
pub use replay::{apply_record, load_credentials};
