//! Opening a data directory for writing: creating a new log, converting a version-1 log,
//! finishing an interrupted compaction, and cutting off (after saving) what was never
//! acknowledged, into the writer's [`Inner`] state.

use std::fs::{self, File, OpenOptions};
use std::path::Path;

use portcullis::store::{StoreError, StoredRecord};

use crate::commit::{self, Commit, COMMIT_FILE_NAME};
use crate::files::{
    io_error, read_if_exists, save_dropped, sync_dir, write_all_at, COMPACTING_FILE_NAME,
};
use crate::format::{self, Header, HEADER_LEN};
use crate::recovery::{self, Analysis};
use crate::state::{new_inner, Inner};

/// Recovers the directory for a writer: creates a new log, converts a version-1 log, brings the
/// commit record up to date after an interrupted compaction, and cuts off (after saving) what was
/// never acknowledged.
pub(crate) fn open_for_writing(dir: &Path, log_path: &Path) -> Result<Inner, StoreError> {
    let compacting = dir.join(COMPACTING_FILE_NAME);
    if compacting.exists() {
        // Only the rename makes a compacted file the log; one still under this name never was.
        tracing::warn!(file = %compacting.display(), "removing the output of an interrupted compaction");
        fs::remove_file(&compacting).map_err(io_error(&compacting))?;
        sync_dir(dir)?;
    }
    let commit_path = dir.join(COMMIT_FILE_NAME);
    let commit = commit::read(&read_if_exists(&commit_path)?);
    let image = read_if_exists(log_path)?;
    let path = log_path.display().to_string();
    let analysis = recovery::analyse(&path, &image, commit)?;
    let commit_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&commit_path)
        .map_err(io_error(&commit_path))?;
    let previous = commit.unwrap_or(Commit {
        sequence: 0,
        generation: 0,
        committed_len: 0,
    });
    match analysis {
        Analysis::New => {
            let header = Header {
                generation: 1,
                base_len: HEADER_LEN as u64,
            };
            let file = create_log(dir, log_path, &header.encode())?;
            let commit = previous.next(1, HEADER_LEN as u64);
            commit::write(&commit_file, &commit).map_err(io_error(&commit_path))?;
            Ok(new_inner(
                file,
                commit_file,
                commit,
                1,
                HEADER_LEN as u64,
                Vec::new(),
            ))
        }
        Analysis::Legacy {
            records,
            valid_len,
            image_len,
            torn,
        } => {
            if image_len > valid_len {
                let tail = image.get(valid_len as usize..).unwrap_or_default();
                let saved = save_dropped(dir, tail)?;
                tracing::warn!(
                    path = %log_path.display(),
                    dropped_bytes = image_len - valid_len,
                    reason = torn.as_deref().unwrap_or("unknown"),
                    saved_to = %saved.display(),
                    "version-1 metadata log ends in an incomplete write (version 1 kept no record of what was \
                     acknowledged); saved it aside and converting the rest"
                );
            }
            convert_legacy(dir, log_path, commit_file, previous, records)
        }
        Analysis::Current(current) => {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(log_path)
                .map_err(io_error(log_path))?;
            if current.unacknowledged > 0 {
                let start = current.committed_len as usize;
                let tail = image.get(start..).unwrap_or_default();
                let saved = save_dropped(dir, tail)?;
                tracing::warn!(
                    path = %log_path.display(),
                    acknowledged_bytes = current.committed_len,
                    dropped_bytes = current.unacknowledged,
                    saved_to = %saved.display(),
                    "the metadata log continues past what was acknowledged (a write interrupted before it was confirmed); \
                     cutting the unacknowledged bytes off"
                );
                file.set_len(current.committed_len)
                    .map_err(io_error(log_path))?;
                file.sync_all().map_err(io_error(log_path))?;
            }
            let mut commit = previous;
            if current.commit_behind {
                commit = previous.next(current.header.generation, current.committed_len);
                commit::write(&commit_file, &commit).map_err(io_error(&commit_path))?;
            }
            Ok(new_inner(
                file,
                commit_file,
                commit,
                current.header.generation,
                current.committed_len,
                current.records,
            ))
        }
    }
}

/// Creates a log file holding `bytes` through a temporary name, durably.
fn create_log(dir: &Path, log_path: &Path, bytes: &[u8]) -> Result<File, StoreError> {
    let tmp = dir.join(COMPACTING_FILE_NAME);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io_error(&tmp))?;
    write_all_at(&file, bytes, 0).map_err(io_error(&tmp))?;
    file.sync_all().map_err(io_error(&tmp))?;
    fs::rename(&tmp, log_path).map_err(io_error(log_path))?;
    sync_dir(dir)?;
    Ok(file)
}

/// Rewrites a version-1 log as generation 1 of a version-2 log, crash-safely: the commit record
/// first names generation 0 (the old file), so a crash after the rename is covered by the
/// one-generation-behind rule.
fn convert_legacy(
    dir: &Path,
    log_path: &Path,
    commit_file: File,
    previous: Commit,
    records: Vec<StoredRecord>,
) -> Result<Inner, StoreError> {
    let commit_path = dir.join(COMMIT_FILE_NAME);
    let before = previous.next(0, 0);
    commit::write(&commit_file, &before).map_err(io_error(&commit_path))?;
    let mut bytes = vec![0u8; HEADER_LEN];
    format::encode_runs(&records, &mut bytes).map_err(|e| io_error(log_path)(e))?;
    let header = Header {
        generation: 1,
        base_len: bytes.len() as u64,
    };
    for (o, b) in bytes.iter_mut().zip(header.encode()) {
        *o = b;
    }
    let file = create_log(dir, log_path, &bytes)?;
    let commit = before.next(1, bytes.len() as u64);
    commit::write(&commit_file, &commit).map_err(io_error(&commit_path))?;
    tracing::info!(path = %log_path.display(), records = records.len(), "converted the metadata log to format version 2");
    Ok(new_inner(
        file,
        commit_file,
        commit,
        1,
        bytes.len() as u64,
        records,
    ))
}
