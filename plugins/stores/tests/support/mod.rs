//! Records and files the file store's integration tests (`file_store.rs`, `file_store_crashes.rs`)
//! both build and inspect.
#![allow(
    dead_code,
    reason = "each test binary that includes this module uses a part of it"
)]
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "test helpers that read the store's real files and panic on failure"
)]

use std::fs;
use std::path::{Path, PathBuf};

use portcullis::credentials::{ScramCredential, ScramMechanism};
use portcullis::store::MetadataRecord;
use portcullis_plugin_stores::DROPPED_FILE_PREFIX;

/// A SCRAM credential whose bytes are all derived from `fill`.
pub fn credential(iterations: u32, fill: u8) -> ScramCredential {
    ScramCredential {
        salt: vec![fill; 16],
        stored_key: vec![fill.wrapping_add(1); 32],
        server_key: vec![fill.wrapping_add(2); 32],
        iterations,
    }
}

/// A record that sets `user`'s credential for `mechanism`.
pub fn set(user: &str, mechanism: ScramMechanism, iterations: u32) -> MetadataRecord {
    MetadataRecord::ScramCredential {
        user: user.to_owned(),
        mechanism,
        credential: credential(iterations, iterations as u8),
    }
}

/// A record that removes `user`'s credential for `mechanism`.
pub fn remove(user: &str, mechanism: ScramMechanism) -> MetadataRecord {
    MetadataRecord::RemoveScramCredential {
        user: user.to_owned(),
        mechanism,
    }
}

/// The files a recovery saved aside in `dir`.
pub fn dropped_files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(DROPPED_FILE_PREFIX)
        })
        .collect()
}
