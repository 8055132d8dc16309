//! The listener's certificate, key and CA files, watched by a cheap poll: a file replaced on
//! disk (a certificate rotated by an operator or an ACME client) triggers a reload within
//! [`POLL_INTERVAL`], with no signal. Each poll hashes the few kilobytes of each file (a
//! rename-into-place that keeps the size and the second of the modification time is still seen).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::config::Config;

/// How often the files are looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// What one file held: its SHA-256, or `None` when it could not be read.
pub type Stamp = (PathBuf, Option<[u8; 32]>);

/// The TLS files `config` names, in a fixed order.
pub fn tls_files(config: &Config) -> Vec<PathBuf> {
    let Some(tls) = &config.listener.tls else {
        return Vec::new();
    };
    let mut files = vec![tls.cert_file.clone(), tls.key_file.clone()];
    files.extend(tls.ca_file.clone());
    files
}

/// The stamps of `files` now.
pub fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    files
        .iter()
        .map(|path| (path.clone(), hash_file(path)))
        .collect()
}

fn hash_file(path: &Path) -> Option<[u8; 32]> {
    let bytes = std::fs::read(path).ok()?;
    Some(Sha256::digest(&bytes).into())
}
