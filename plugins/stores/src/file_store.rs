//! [`FileMetadataStore`]: the embedded metadata store, an fsync'd log file in the data directory.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use portcullis::store::{
    AppendBatch, Condition, MetadataRecord, MetadataStore, Offset, RecordKey, StoreError,
    StoredRecord, Subscriber, SubscriptionId,
};

use crate::commit::{self, Commit, COMMIT_FILE_NAME};
use crate::files::{
    io_error, lock_dir, read_exact_at, read_if_exists, write_all_at, LOG_FILE_NAME,
};
use crate::format::{self, HEADER_LEN};
use crate::open::open_for_writing;
use crate::recovery::{self, Analysis};
use crate::state::{Health, Inner};

/// Records replayed to a subscriber per call.
const REPLAY_CHUNK: usize = 4_096;

/// Tuning of a [`FileMetadataStore`].
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Compaction is due when at least this many records in the log are dead (superseded or
    /// deleted) *and* the dead outnumber the live: the log stays below about twice the live
    /// records plus this.
    pub compaction_min_dead: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            compaction_min_dead: 10_000,
        }
    }
}

/// Counters of a store, for tests, benchmarks and operators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// `fsync`s of the log file after appends.
    pub log_syncs: u64,
    /// `fsync`s of the commit record.
    pub commit_syncs: u64,
    /// Groups of appends made durable together.
    pub groups: u64,
    /// Batches appended.
    pub batches: u64,
    /// Records in the current log file (live and dead).
    pub records_in_file: u64,
    /// Keys with a live record.
    pub live_records: u64,
    /// The log file's length.
    pub log_bytes: u64,
    /// The log file's generation (1 + the compactions so far).
    pub generation: u64,
    /// Compactions done by this process.
    pub compactions: u64,
}

/// The embedded [`MetadataStore`]: a checksummed log file, `<data_dir>/metadata.log`, with its
/// commit record `<data_dir>/metadata.committed`, owned by one process at a time.
///
/// - **Durable**: an append returns only after the log and then the commit record are synced.
/// - **Group commit**: [`append_group`](MetadataStore::append_group) writes many batches with one
///   log sync and one commit-record sync.
/// - **Atomic**: the records of one batch are one frame on disk, so after a crash either all
///   of them are in the log or none.
/// - **Honest about what was acknowledged**: [`open`](Self::open) refuses a log with less than
///   the commit record says was acknowledged, or with damage in that part; only what lies beyond
///   it (never acknowledged) is cut off, and saved aside first.
/// - **Compacted**: [`compact`](Self::compact) rewrites the live records into a new generation and
///   swaps it in atomically; offsets are kept.
/// - **Exclusive**: the data directory is locked (`<data_dir>/.lock`) for as long as the store
///   lives. [`read_only`](Self::read_only) reads without the lock and never writes.
pub struct FileMetadataStore {
    dir: PathBuf,
    log_path: PathBuf,
    /// Holds the directory lock; the OS releases it when this file is closed.
    _lock: File,
    options: StoreOptions,
    inner: Mutex<Inner>,
    /// Held for a whole compaction, so two never overlap.
    compaction: Mutex<()>,
    stats: Counters,
}

#[derive(Default)]
struct Counters {
    log_syncs: AtomicU64,
    commit_syncs: AtomicU64,
    groups: AtomicU64,
    batches: AtomicU64,
    compactions: AtomicU64,
}

/// The records of a data directory, read without locking or writing it.
#[derive(Debug, Default)]
pub struct ReadOnlyLog {
    /// Every acknowledged record, in log order.
    pub records: Vec<StoredRecord>,
    /// Bytes beyond the acknowledged end that were ignored (a write in progress, or the remains
    /// of one a crash interrupted).
    pub ignored_bytes: u64,
}

impl FileMetadataStore {
    /// Opens (creating if needed) the store in `data_dir` for writing, with default options.
    ///
    /// # Errors
    /// See [`FileMetadataStore::open_with`].
    pub fn open(data_dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(data_dir, StoreOptions::default())
    }

    /// Opens (creating if needed) the store in `data_dir` for writing: locks the directory, reads
    /// and verifies every acknowledged record, and recovers from an interrupted write or
    /// compaction.
    ///
    /// # Errors
    /// - [`StoreError::Locked`] if another store holds `data_dir`.
    /// - [`StoreError::Corrupt`] if the acknowledged part of the log is damaged, or the log and
    ///   the commit record do not belong together.
    /// - [`StoreError::Lost`] if the log holds less than was acknowledged.
    /// - [`StoreError::Io`] if files cannot be created, read or written.
    pub fn open_with(
        data_dir: impl AsRef<Path>,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        let dir = data_dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        // Lock before reading: recovery truncates the log, which must never happen under a
        // process that is still appending to it.
        let lock = lock_dir(&dir)?;
        let log_path = dir.join(LOG_FILE_NAME);
        let inner = open_for_writing(&dir, &log_path)?;
        Ok(Self {
            dir,
            log_path,
            _lock: lock,
            options,
            inner: Mutex::new(inner),
            compaction: Mutex::new(()),
            stats: Counters::default(),
        })
    }

    /// Reads the acknowledged records of `data_dir` without taking its lock and without writing
    /// anything, also while a node runs on it. A missing directory or log reads as empty.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] or [`StoreError::Lost`] as for [`open`](Self::open) (nothing is
    /// repaired), [`StoreError::Io`] if a file cannot be read.
    pub fn read_only(data_dir: impl AsRef<Path>) -> Result<ReadOnlyLog, StoreError> {
        let dir = data_dir.as_ref();
        let log_path = dir.join(LOG_FILE_NAME);
        let path = log_path.display().to_string();
        // The commit record first: it is written after the log, so the log read next holds at
        // least what it says (unless a compaction swaps the file in between, which the
        // generation rules of `recovery` cover).
        let commit = commit::read(&read_if_exists(&dir.join(COMMIT_FILE_NAME))?);
        let image = read_if_exists(&log_path)?;
        match recovery::analyse(&path, &image, commit)? {
            Analysis::New => Ok(ReadOnlyLog::default()),
            Analysis::Legacy {
                records,
                valid_len,
                image_len,
                ..
            } => Ok(ReadOnlyLog {
                records,
                ignored_bytes: image_len - valid_len,
            }),
            Analysis::Current(current) => Ok(ReadOnlyLog {
                records: current.records,
                ignored_bytes: current.unacknowledged,
            }),
        }
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.log_path
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Drops the records kept from [`open`](Self::open) for start-up subscriptions. Later
    /// subscriptions read the log file instead. Call it once the node's views are built.
    pub fn release_startup_cache(&self) {
        self.lock().cache = None;
    }

    /// The store's counters.
    pub fn stats(&self) -> StoreStats {
        let inner = self.lock();
        StoreStats {
            log_syncs: self.stats.log_syncs.load(Ordering::Relaxed),
            commit_syncs: self.stats.commit_syncs.load(Ordering::Relaxed),
            groups: self.stats.groups.load(Ordering::Relaxed),
            batches: self.stats.batches.load(Ordering::Relaxed),
            records_in_file: inner.records_in_file,
            live_records: inner.live.len() as u64,
            log_bytes: inner.end,
            generation: inner.generation,
            compactions: self.stats.compactions.load(Ordering::Relaxed),
        }
    }

    /// Whether enough of the log is dead for [`compact`](Self::compact) to be worth it.
    pub fn needs_compaction(&self) -> bool {
        let inner = self.lock();
        let dead = inner
            .records_in_file
            .saturating_sub(inner.live.len() as u64);
        dead >= self.options.compaction_min_dead && dead >= inner.live.len() as u64
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking subscriber poisons the mutex after the append it observed is complete and
        // recorded, so the state behind it is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lock_compaction(&self) -> MutexGuard<'_, ()> {
        self.compaction
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn compaction_done(&self) {
        self.stats.compactions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn io(&self, source: io::Error) -> StoreError {
        io_error(&self.log_path)(source)
    }

    /// Reads the log file's bytes `[start, end)` (of the current generation).
    pub(crate) fn read_log_range(file: &File, start: u64, end: u64) -> io::Result<Vec<u8>> {
        let len = usize::try_from(end.saturating_sub(start)).map_err(io::Error::other)?;
        let mut buf = vec![0u8; len];
        read_exact_at(file, &mut buf, start)?;
        Ok(buf)
    }

    /// Replays `[from, …)` of the acknowledged log to `subscriber`, from the start-up cache or the
    /// file. Called with the lock held, so no append can slip in between replay and tail.
    fn replay(
        inner: &Inner,
        from: Offset,
        subscriber: &mut dyn FnMut(&[StoredRecord]),
    ) -> io::Result<()> {
        if let Some(cache) = &inner.cache {
            let start = cache.partition_point(|r| r.offset < from);
            for chunk in cache.get(start..).unwrap_or_default().chunks(REPLAY_CHUNK) {
                subscriber(chunk);
            }
            return Ok(());
        }
        let image = Self::read_log_range(&inner.file, 0, inner.end)?;
        let end = usize::try_from(inner.end).map_err(io::Error::other)?;
        let mut pending: Vec<StoredRecord> = Vec::new();
        format::read_frames(&image, HEADER_LEN, end, |frame| {
            pending.extend(frame.into_iter().filter(|r| r.offset >= from));
            if pending.len() >= REPLAY_CHUNK {
                subscriber(&pending);
                pending.clear();
            }
        })
        .map_err(|d| io::Error::other(format!("at byte {}: {}", d.offset, d.reason)))?;
        if !pending.is_empty() {
            subscriber(&pending);
        }
        Ok(())
    }

    /// Installs the state of a new generation after compaction (called with the lock held).
    pub(crate) fn install_generation(
        inner: &mut Inner,
        file: File,
        generation: u64,
        len: u64,
        records_in_file: u64,
        commit: Commit,
    ) {
        inner.file = file;
        inner.generation = generation;
        inner.end = len;
        inner.records_in_file = records_in_file;
        inner.commit = commit;
    }

    /// Writes a commit record (called with the lock held).
    pub(crate) fn write_commit(&self, inner: &mut Inner, commit: Commit) -> io::Result<()> {
        commit::write(&inner.commit_file, &commit)?;
        self.stats.commit_syncs.fetch_add(1, Ordering::Relaxed);
        inner.commit = commit;
        Ok(())
    }

    pub(crate) fn fail(inner: &mut Inner, reason: String) {
        tracing::error!(%reason, "metadata store stops writing; restart the node to recover");
        inner.health = Health::Failed { reason };
    }

    pub(crate) fn check_writable(&self, inner: &Inner) -> Result<(), StoreError> {
        match &inner.health {
            Health::Writable => Ok(()),
            Health::Failed { reason } => Err(self.io(io::Error::other(format!(
                "store refuses writes after an earlier failure ({reason}); restart the node to recover"
            )))),
        }
    }
}

impl MetadataStore for FileMetadataStore {
    fn append(&self, records: &[MetadataRecord]) -> Result<Offset, StoreError> {
        self.append_batch(&AppendBatch::new(records.to_vec()))
    }

    fn append_batch(&self, batch: &AppendBatch) -> Result<Offset, StoreError> {
        self.append_group(std::slice::from_ref(batch))
            .pop()
            .unwrap_or_else(|| Err(self.io(io::Error::other("no result for the batch"))))
    }

    fn append_group(&self, batches: &[AppendBatch]) -> Vec<Result<Offset, StoreError>> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Err(e) = self.check_writable(inner) {
            let message = e.to_string();
            return batches
                .iter()
                .map(|_| Err(self.io(io::Error::other(message.clone()))))
                .collect();
        }
        // Conditions are checked in order against the log as it will be once the earlier
        // batches of the group are in it.
        let mut overlay: HashMap<RecordKey, Option<Offset>> = HashMap::new();
        let mut results: Vec<Result<Offset, StoreError>> = Vec::with_capacity(batches.len());
        let mut accepted: Vec<usize> = Vec::new();
        let mut frames = Vec::new();
        let mut offset = inner.next_offset;
        for (i, batch) in batches.iter().enumerate() {
            if let Some(key) = failed_condition(&batch.conditions, &inner.live, &overlay) {
                results.push(Err(StoreError::Conflict { key }));
                continue;
            }
            if batch.records.is_empty() {
                results.push(Ok(offset));
                continue;
            }
            let before = frames.len();
            if let Err(e) = format::encode_frame(offset, &batch.records, &mut frames) {
                frames.truncate(before);
                results.push(Err(self.io(io::Error::new(io::ErrorKind::InvalidInput, e))));
                continue;
            }
            for (j, record) in batch.records.iter().enumerate() {
                let at = offset + j as Offset;
                overlay.insert(record.key(), (!record.is_tombstone()).then_some(at));
            }
            results.push(Ok(offset));
            accepted.push(i);
            offset += batch.records.len() as Offset;
        }
        if frames.is_empty() {
            return results;
        }
        if let Err(e) = self.write_durably(inner, &frames) {
            let message = e.to_string();
            for &i in &accepted {
                if let Some(slot) = results.get_mut(i) {
                    *slot = Err(self.io(io::Error::new(e.kind(), message.clone())));
                }
            }
            return results;
        }
        // Durable and committed: apply to the index, then hand the records to the subscribers
        // before anyone is told, so the views have them when the writers hear back.
        self.stats.groups.fetch_add(1, Ordering::Relaxed);
        self.stats
            .batches
            .fetch_add(accepted.len() as u64, Ordering::Relaxed);
        let mut stored: Vec<StoredRecord> = Vec::new();
        for &i in &accepted {
            let (Some(batch), Some(Ok(first))) = (batches.get(i), results.get(i)) else {
                continue;
            };
            for (j, record) in batch.records.iter().enumerate() {
                stored.push(StoredRecord {
                    offset: first + j as Offset,
                    record: record.clone(),
                });
            }
        }
        inner.next_offset = offset;
        inner.records_in_file += stored.len() as u64;
        for (key, latest) in overlay {
            match latest {
                Some(at) => inner.live.insert(key, at),
                None => inner.live.remove(&key),
            };
        }
        for (_, subscriber) in &mut inner.subscribers {
            subscriber(&stored);
        }
        if let Some(cache) = &mut inner.cache {
            cache.extend(stored);
        }
        results
    }

    fn subscribe(
        &self,
        from: Offset,
        mut subscriber: Subscriber,
    ) -> Result<SubscriptionId, StoreError> {
        let mut inner = self.lock();
        Self::replay(&inner, from, &mut *subscriber).map_err(|e| self.io(e))?;
        let id = SubscriptionId(inner.next_subscription);
        inner.next_subscription += 1;
        inner.subscribers.push((id, subscriber));
        Ok(id)
    }

    fn unsubscribe(&self, id: SubscriptionId) {
        self.lock().subscribers.retain(|(s, _)| *s != id);
    }

    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError> {
        let inner = self.lock();
        let mut out = Vec::new();
        Self::replay(&inner, 0, &mut |records: &[StoredRecord]| {
            out.extend(records.iter().map(|r| r.record.clone()));
        })
        .map_err(|e| self.io(e))?;
        Ok(out)
    }
    fn location(&self) -> String {
        self.path().display().to_string()
    }

    fn replay_done(&self) {
        self.release_startup_cache();
    }

    fn maintenance_due(&self) -> bool {
        self.needs_compaction()
    }

    fn maintain(&self) -> Result<(), StoreError> {
        self.compact().map(drop)
    }
}

impl FileMetadataStore {
    /// Writes `frames` at the end of the log, syncs it, then writes and syncs the commit record.
    fn write_durably(&self, inner: &mut Inner, frames: &[u8]) -> io::Result<()> {
        if let Err(e) = write_all_at(&inner.file, frames, inner.end) {
            // Cut off whatever part made it into the file, so the next frame follows intact data.
            if let Err(trim) = inner.file.set_len(inner.end) {
                Self::fail(
                    inner,
                    format!("write failed ({e}) and could not be undone ({trim})"),
                );
            }
            return Err(e);
        }
        if let Err(e) = inner.file.sync_data() {
            Self::fail(inner, format!("fsync of the log failed ({e})"));
            return Err(e);
        }
        self.stats.log_syncs.fetch_add(1, Ordering::Relaxed);
        let new_end = inner.end + frames.len() as u64;
        let commit = inner.commit.next(inner.generation, new_end);
        if let Err(e) = self.write_commit(inner, commit) {
            // The log now holds frames the commit record does not cover: they were never
            // acknowledged, and the next open cuts them off. Writing on would mix them with
            // acknowledged ones.
            Self::fail(inner, format!("writing the commit record failed ({e})"));
            return Err(e);
        }
        inner.end = new_end;
        Ok(())
    }
}

/// The key of the first condition that does not hold.
fn failed_condition(
    conditions: &[Condition],
    live: &HashMap<RecordKey, Offset>,
    overlay: &HashMap<RecordKey, Option<Offset>>,
) -> Option<RecordKey> {
    conditions.iter().find_map(|condition| {
        let key = condition.key();
        let current = match overlay.get(key) {
            Some(latest) => *latest,
            None => live.get(key).copied(),
        };
        (!condition.holds(current)).then(|| key.clone())
    })
}

impl fmt::Debug for FileMetadataStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("FileMetadataStore")
            .field("path", &self.log_path)
            .field("records", &inner.records_in_file)
            .field("bytes", &inner.end)
            .field("generation", &inner.generation)
            .field("writable", &matches!(inner.health, Health::Writable))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
