//! The operator's way out of a damaged or shortened log:
//! [`FileMetadataStore::recover_accepting_loss`] and its [`LossReport`].

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use portcullis::store::StoreError;

use crate::commit::{self, Commit, COMMIT_FILE_NAME};
use crate::file_store::FileMetadataStore;
use crate::files::{io_error, lock_dir, read_if_exists, save_dropped, sync_dir, LOG_FILE_NAME};
use crate::format::{self, HEADER_LEN};

/// What [`FileMetadataStore::recover_accepting_loss`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LossReport {
    /// Records kept (the intact start of the log).
    pub records_kept: u64,
    /// Bytes cut off the end of the log.
    pub bytes_dropped: u64,
    /// Where those bytes were saved, if there were any.
    pub saved_to: Option<PathBuf>,
    /// What the commit record said had been acknowledged, if it was readable.
    pub committed_before: Option<u64>,
    /// The log's length now (all of it acknowledged).
    pub log_len: u64,
}

impl FileMetadataStore {
    /// The operator's way out when [`open`](Self::open) refuses a damaged or shortened log:
    /// keeps the longest intact start of the log, saves the rest aside
    /// (`metadata.log.dropped-<ms>`), and records the kept part as acknowledged. Acknowledged
    /// changes after the damage are lost — that is the point of asking first — so this is never
    /// done automatically (`portcullis store recover --accept-loss`).
    ///
    /// # Errors
    /// [`StoreError::Locked`] if a node runs on the directory; [`StoreError::Corrupt`] if the file
    /// header itself is unreadable (restore from a backup); I/O errors.
    pub fn recover_accepting_loss(data_dir: impl AsRef<Path>) -> Result<LossReport, StoreError> {
        let dir = data_dir.as_ref();
        let lock = lock_dir(dir)?;
        let log_path = dir.join(LOG_FILE_NAME);
        let commit_path = dir.join(COMMIT_FILE_NAME);
        let image = read_if_exists(&log_path)?;
        let previous = commit::read(&read_if_exists(&commit_path)?);
        let header = match format::read_header(&image) {
            Ok(format::FileKind::V2(header)) => header,
            Ok(format::FileKind::V1) => {
                // Opening converts version-1 logs, cutting a damaged end off as those logs always were.
                drop(lock);
                let store = Self::open(dir)?;
                let stats = store.stats();
                return Ok(LossReport {
                    records_kept: stats.records_in_file,
                    bytes_dropped: 0,
                    saved_to: None,
                    committed_before: None,
                    log_len: stats.log_bytes,
                });
            }
            Err(d) => {
                return Err(StoreError::Corrupt {
                    path: log_path.display().to_string(),
                    offset: d.offset,
                    reason: format!("{}; restore the data directory from a backup", d.reason),
                })
            }
        };
        let mut pos = HEADER_LEN;
        let mut records = 0u64;
        let mut next_min = 0;
        while let Some(rest) = image.get(pos..).filter(|r| !r.is_empty()) {
            match format::read_frame(rest) {
                Ok(frame) if frame.records.first().is_some_and(|r| r.offset >= next_min) => {
                    next_min = frame.records.last().map_or(next_min, |r| r.offset + 1);
                    records += frame.records.len() as u64;
                    pos += frame.len;
                }
                _ => break,
            }
        }
        let keep = pos as u64;
        let dropped = image.get(pos..).unwrap_or_default();
        let saved_to = if dropped.is_empty() {
            None
        } else {
            Some(save_dropped(dir, dropped)?)
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(io_error(&log_path))?;
        file.set_len(keep).map_err(io_error(&log_path))?;
        file.sync_all().map_err(io_error(&log_path))?;
        let commit_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&commit_path)
            .map_err(io_error(&commit_path))?;
        let base = previous.unwrap_or(Commit {
            sequence: 0,
            generation: 0,
            committed_len: 0,
        });
        commit::write(&commit_file, &base.next(header.generation, keep))
            .map_err(io_error(&commit_path))?;
        sync_dir(dir)?;
        tracing::warn!(
            path = %log_path.display(),
            records_kept = records,
            bytes_dropped = dropped.len(),
            "metadata log recovered by accepting the loss of everything after its intact start"
        );
        Ok(LossReport {
            records_kept: records,
            bytes_dropped: dropped.len() as u64,
            saved_to,
            committed_before: previous.map(|c| c.committed_len),
            log_len: keep,
        })
    }
}
