//! [`FileMetadataStore`]: the embedded metadata store, an fsync'd log file in the data directory.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use portcullis::store::{
    AppendBatch, Condition, MetadataRecord, MetadataStore, Offset, RecordKey, StoreError,
    StoredRecord, Subscriber, SubscriptionId,
};

use crate::commit::{self, Commit, COMMIT_FILE_NAME};
use crate::format::{self, Header, HEADER_LEN};
use crate::recovery::{self, Analysis};

/// The log's file name inside the data directory.
pub const LOG_FILE_NAME: &str = "metadata.log";
/// The lock file's name inside the data directory.
pub const LOCK_FILE_NAME: &str = ".lock";
/// Where compaction writes the next generation before renaming it over the log.
pub const COMPACTING_FILE_NAME: &str = "metadata.log.compacting";
/// Prefix of the files that keep bytes cut off the end of the log (`<prefix><unix ms>`).
pub const DROPPED_FILE_PREFIX: &str = "metadata.log.dropped-";

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

/// Everything appends change, behind one lock so that appends are serialized.
pub(crate) struct Inner {
    pub(crate) file: File,
    commit_file: File,
    pub(crate) commit: Commit,
    pub(crate) generation: u64,
    /// The end of the acknowledged log, where the next frame goes.
    pub(crate) end: u64,
    pub(crate) next_offset: Offset,
    /// The offset of the latest record of every key whose latest record is not a tombstone.
    pub(crate) live: HashMap<RecordKey, Offset>,
    /// Records in the current file, live or dead.
    pub(crate) records_in_file: u64,
    health: Health,
    subscribers: Vec<(SubscriptionId, Subscriber)>,
    next_subscription: u64,
    /// The records read at open, kept to replay start-up subscriptions without reading the file
    /// again; see [`FileMetadataStore::release_startup_cache`].
    cache: Option<Vec<StoredRecord>>,
}

/// Whether the store may still write.
enum Health {
    Writable,
    /// An earlier write failed in a way that leaves the file's contents unknown (a failed fsync
    /// may have dropped dirty pages; a failed write could not be undone). Every later append fails;
    /// reopening the store re-reads and re-verifies the log.
    Failed {
        reason: String,
    },
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
        let lock_path = dir.join(LOCK_FILE_NAME);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Locked(dir.display().to_string()))
            }
            Err(TryLockError::Error(e)) => return Err(io_error(&lock_path)(e)),
        }
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
        let lock_path = dir.join(LOCK_FILE_NAME);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Locked(dir.display().to_string()))
            }
            Err(TryLockError::Error(e)) => return Err(io_error(&lock_path)(e)),
        }
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

/// Recovers the directory for a writer: creates a new log, converts a version-1 log, brings the
/// commit record up to date after an interrupted compaction, and cuts off (after saving) what was
/// never acknowledged.
fn open_for_writing(dir: &Path, log_path: &Path) -> Result<Inner, StoreError> {
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

fn new_inner(
    file: File,
    commit_file: File,
    commit: Commit,
    generation: u64,
    end: u64,
    records: Vec<StoredRecord>,
) -> Inner {
    // Sized up front: growing a map of a million keys rehashes every key several times.
    let mut live = HashMap::with_capacity(records.len());
    let mut next_offset = 0;
    for r in &records {
        if r.record.is_tombstone() {
            live.remove(&r.record.key());
        } else {
            live.insert(r.record.key(), r.offset);
        }
        next_offset = r.offset + 1;
    }
    Inner {
        file,
        commit_file,
        commit,
        generation,
        end,
        next_offset,
        live,
        records_in_file: records.len() as u64,
        health: Health::Writable,
        subscribers: Vec::new(),
        next_subscription: 0,
        cache: Some(records),
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
    crate::compaction::encode_runs(&records, &mut bytes).map_err(|e| io_error(log_path)(e))?;
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

/// Saves bytes about to be cut off the log next to it, durably, and returns the file's path.
fn save_dropped(dir: &Path, bytes: &[u8]) -> Result<PathBuf, StoreError> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = dir.join(format!("{DROPPED_FILE_PREFIX}{ms}"));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io_error(&path))?;
    write_all_at(&file, bytes, 0).map_err(io_error(&path))?;
    file.sync_all().map_err(io_error(&path))?;
    sync_dir(dir)?;
    Ok(path)
}

fn read_if_exists(path: &Path) -> Result<Vec<u8>, StoreError> {
    match File::open(path) {
        Ok(mut f) => {
            let mut out = Vec::new();
            f.read_to_end(&mut out).map_err(io_error(path))?;
            Ok(out)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_error(path)(e)),
    }
}

#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, offset)
}

#[cfg(not(unix))]
pub(crate) fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(bytes)
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> Result<(), StoreError> {
    // Directories cannot be opened for syncing here; the file system orders the entry itself.
    Ok(())
}

pub(crate) fn io_error(path: &Path) -> impl Fn(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::credentials::ScramMechanism;

    fn removal(user: &str) -> MetadataRecord {
        MetadataRecord::RemoveScramCredential {
            user: user.to_owned(),
            mechanism: ScramMechanism::Sha512,
        }
    }

    #[test]
    fn a_group_is_one_log_sync_and_one_commit_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileMetadataStore::open(dir.path()).unwrap();
        let before = store.stats();
        let batches: Vec<AppendBatch> = (0..10)
            .map(|i| AppendBatch::new(vec![removal(&format!("u{i}"))]))
            .collect();
        let results = store.append_group(&batches);
        assert_eq!(
            results.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        let after = store.stats();
        assert_eq!(after.log_syncs - before.log_syncs, 1);
        assert_eq!(after.commit_syncs - before.commit_syncs, 1);
        assert_eq!(after.batches, 10);
        // Nothing to write, nothing to sync.
        assert_eq!(store.append(&[]).unwrap(), 10);
        assert_eq!(store.stats().log_syncs, after.log_syncs);
    }

    #[test]
    fn a_failed_store_refuses_appends() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileMetadataStore::open(dir.path()).unwrap();
        FileMetadataStore::fail(&mut store.lock(), "fsync failed (test)".to_owned());
        let err = store.append(&[removal("a")]).unwrap_err();
        assert!(err.to_string().contains("restart"), "{err}");
        assert!(store.snapshot().unwrap().is_empty());
    }
}
