//! Compaction: the live records are written into a new generation of the log, which replaces the
//! old one atomically. A workload that keeps creating and deleting (delegation tokens) would
//! otherwise grow the log without bound.
//!
//! The steps, and what a crash after each leaves (the open rules are in `recovery.rs`):
//!
//! | step | done | a crash after it |
//! |------|------|------------------|
//! | 1 | live records of `[header, P)` written to `metadata.log.compacting` and synced, without holding up appends | the old log is still the log; the next open deletes the leftover file |
//! | 2 | (appends held) the frames appended since `P` copied after them, the header (generation `g+1`, `base_len` = length) written, synced | as above |
//! | 3 | renamed over `metadata.log` | the log is generation `g+1`, the commit record still says `g`: the `base_len` rule accepts everything in it |
//! | 4 | directory synced | as 3, and the rename is durable |
//! | 5 | commit record names `g+1` | done |
//!
//! Offsets are kept: a kept record has the offset it had, so subscriptions and conditions do not
//! notice compaction. Tombstones are dropped with everything they deleted: every view of this
//! store is rebuilt from offset 0, so nothing needs to see the deletion again.

use std::collections::HashMap;
use std::fs::OpenOptions;

use portcullis::store::{Offset, RecordKey, StoreError, StoredRecord};

use crate::file_store::FileMetadataStore;
use crate::files::{sync_dir, write_all_at, COMPACTING_FILE_NAME};
use crate::format::{self, encode_runs, Header, HEADER_LEN};

/// A point in a compaction, for tests that crash the process there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompactionStep {
    /// The live records are written to the new file and synced.
    SnapshotWritten,
    /// The tail is copied and the new file has its header and is synced.
    TailCopied,
    /// The new file has been renamed over the log.
    Renamed,
    /// The directory is synced.
    DirSynced,
    /// The commit record names the new generation.
    Committed,
}

/// What a compaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionReport {
    /// Records in the log before.
    pub records_before: u64,
    /// Records in the log after.
    pub records_after: u64,
    /// Log length before.
    pub bytes_before: u64,
    /// Log length after.
    pub bytes_after: u64,
    /// The new generation.
    pub generation: u64,
}

impl FileMetadataStore {
    /// Compacts the log (see the module documentation). Appends continue while the live records
    /// are written, and wait only while the tail is copied and the new file swapped in.
    ///
    /// # Errors
    /// An I/O error. Before the rename the old log stays as it was and the store keeps working;
    /// after it, the store stops writing (restart to recover: the files are consistent).
    pub fn compact(&self) -> Result<CompactionReport, StoreError> {
        self.compact_observed(&mut |_| {})
    }

    /// [`compact`](Self::compact), calling `observe` after each step (tests use it to crash the
    /// process at each one).
    #[doc(hidden)]
    pub fn compact_observed(
        &self,
        observe: &mut dyn FnMut(CompactionStep),
    ) -> Result<CompactionReport, StoreError> {
        let _only_one = self.lock_compaction();
        // Step 0: what to keep, as of now.
        let (generation, start_end, start_records, live, source) = {
            let inner = self.lock();
            self.check_writable(&inner)?;
            let source = inner.file.try_clone().map_err(|e| self.io(e))?;
            (
                inner.generation,
                inner.end,
                inner.records_in_file,
                inner.live.clone(),
                source,
            )
        };
        let tmp_path = self.dir().join(COMPACTING_FILE_NAME);
        let tmp = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp_path)
            .map_err(|e| self.io(e))?;
        let cleanup = |e: StoreError| {
            let _ = std::fs::remove_file(&tmp_path);
            e
        };

        // Step 1: the live records of [header, start_end), without holding appends up. The file
        // before `start_end` never changes while this generation is the log.
        let image = FileMetadataStore::read_log_range(&source, 0, start_end)
            .map_err(|e| cleanup(self.io(e)))?;
        let mut kept: Vec<StoredRecord> = Vec::with_capacity(live.len());
        let end = usize::try_from(start_end).unwrap_or(usize::MAX);
        format::read_frames(&image, HEADER_LEN, end, |frame| {
            kept.extend(frame.into_iter().filter(|r| is_live(&live, r)));
        })
        .map_err(|d| {
            cleanup(StoreError::Corrupt {
                path: self.path().display().to_string(),
                offset: d.offset,
                reason: d.reason,
            })
        })?;
        drop(image);
        let mut bytes = vec![0u8; HEADER_LEN];
        encode_runs(&kept, &mut bytes).map_err(|e| cleanup(self.io(e)))?;
        write_all_at(&tmp, &bytes, 0).map_err(|e| cleanup(self.io(e)))?;
        tmp.sync_data().map_err(|e| cleanup(self.io(e)))?;
        observe(CompactionStep::SnapshotWritten);

        // Step 2 on, with appends held: the tail, the header, the swap.
        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Err(e) = self.check_writable(inner) {
            return Err(cleanup(e));
        }
        let tail = FileMetadataStore::read_log_range(&inner.file, start_end, inner.end)
            .map_err(|e| cleanup(self.io(e)))?;
        let snapshot_len = bytes.len() as u64;
        let total = snapshot_len + tail.len() as u64;
        let header = Header {
            generation: generation + 1,
            base_len: total,
        };
        let written = write_all_at(&tmp, &tail, snapshot_len)
            .and_then(|()| write_all_at(&tmp, &header.encode(), 0))
            .and_then(|()| tmp.sync_all());
        written.map_err(|e| cleanup(self.io(e)))?;
        observe(CompactionStep::TailCopied);

        std::fs::rename(&tmp_path, self.path()).map_err(|e| cleanup(self.io(e)))?;
        observe(CompactionStep::Renamed);
        // From here the new file is the log: a failure leaves consistent files, but this process
        // no longer knows which one it is writing to, so it stops writing.
        if let Err(e) = sync_dir(self.dir()) {
            FileMetadataStore::fail(
                inner,
                format!("directory sync after compaction failed ({e})"),
            );
            return Err(e);
        }
        observe(CompactionStep::DirSynced);
        let commit = inner.commit.next(generation + 1, total);
        if let Err(e) = self.write_commit(inner, commit) {
            FileMetadataStore::fail(
                inner,
                format!("commit record after compaction failed ({e})"),
            );
            return Err(self.io(e));
        }
        observe(CompactionStep::Committed);
        let records_before = inner.records_in_file;
        let records_after = kept.len() as u64 + (inner.records_in_file - start_records);
        let bytes_before = inner.end;
        FileMetadataStore::install_generation(
            inner,
            tmp,
            generation + 1,
            total,
            records_after,
            commit,
        );
        drop(guard);
        self.compaction_done();
        let report = CompactionReport {
            records_before,
            records_after,
            bytes_before,
            bytes_after: total,
            generation: generation + 1,
        };
        tracing::info!(?report, "metadata log compacted");
        Ok(report)
    }
}

fn is_live(live: &HashMap<RecordKey, Offset>, record: &StoredRecord) -> bool {
    !record.record.is_tombstone() && live.get(&record.record.key()) == Some(&record.offset)
}
