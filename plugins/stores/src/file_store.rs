//! [`FileMetadataStore`]: the embedded metadata store, an fsync'd log file in the data directory.

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use portcullis::store::{MetadataRecord, MetadataStore, Offset, StoreError};

use crate::format::{self, Tail};

/// The log's file name inside the data directory.
pub const LOG_FILE_NAME: &str = "metadata.log";
/// The lock file's name inside the data directory.
pub const LOCK_FILE_NAME: &str = ".lock";

/// Called with every record after it is durable, in log order.
pub type Listener = Box<dyn Fn(&MetadataRecord) + Send + Sync>;

/// The embedded [`MetadataStore`]: an append-only, checksummed log file,
/// `<data_dir>/metadata.log`, owned by one process at a time.
///
/// - **Durable**: [`append`](MetadataStore::append) returns only after `fsync`.
/// - **Atomic**: the records of one `append` are one frame on disk, so after a crash either all
///   of them are in the log or none.
/// - **Checked**: [`open`](Self::open) reads and verifies the whole log. Damage refuses the open
///   with [`StoreError::Corrupt`]; the remains of an unacknowledged write at the end are cut off.
/// - **Exclusive**: the data directory is locked (`<data_dir>/.lock`) for as long as the store
///   lives; a second open gets [`StoreError::Locked`].
///
/// Every record is also kept in memory: security metadata is small, and
/// [`snapshot`](MetadataStore::snapshot) is then a copy.
pub struct FileMetadataStore {
    log_path: PathBuf,
    /// Holds the directory lock; the OS releases it when this file is closed (on drop, or when
    /// the process dies).
    _lock: File,
    inner: Mutex<Inner>,
}

/// Everything appends change, behind one lock so that appends are serialized.
struct Inner {
    file: File,
    /// Where the next frame goes: the end of the intact log.
    end: u64,
    records: Vec<MetadataRecord>,
    health: Health,
    listeners: Vec<Listener>,
    /// Successful `fsync`s of appended data, so tests can see the durability path run.
    #[cfg(test)]
    syncs: u64,
}

/// Whether the store may still write.
enum Health {
    Writable,
    /// An earlier write failed in a way that leaves the file's contents unknown (a failed fsync
    /// may have dropped dirty pages; a failed write could not be undone). Writing on would risk
    /// putting acknowledged records after garbage, so every later append fails; reopening the
    /// store re-reads and re-verifies the log.
    Failed {
        reason: String,
    },
}

impl FileMetadataStore {
    /// Opens (creating if needed) the log in `data_dir`, locks the directory, and reads and
    /// verifies every record.
    ///
    /// # Errors
    /// - [`StoreError::Locked`] if another store (in this or another process) holds `data_dir`.
    /// - [`StoreError::Corrupt`] if the log is damaged anywhere but in its unacknowledged tail;
    ///   the node must not start on it.
    /// - [`StoreError::Io`] if the directory or files cannot be created, read or written.
    pub fn open(data_dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        let dir = data_dir.as_ref();
        fs::create_dir_all(dir).map_err(io_error(dir))?;

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
        let (file, end, records) = recover(dir, &log_path)?;
        Ok(Self {
            log_path,
            _lock: lock,
            inner: Mutex::new(Inner {
                file,
                end,
                records,
                health: Health::Writable,
                listeners: Vec::new(),
                #[cfg(test)]
                syncs: 0,
            }),
        })
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.log_path
    }

    /// Registers `listener`, called with each record once it is durable, in log order, before
    /// `append` returns. Records already in the log are not replayed: take a
    /// [`snapshot`](MetadataStore::snapshot) (or call [`crate::load_credentials`]) first.
    ///
    /// Listeners run while appends are held off, so that they see records in log order: a
    /// listener must be quick and must not call back into this store (that would deadlock).
    pub fn add_listener(&self, listener: Listener) {
        self.lock().listeners.push(listener);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking listener poisons the mutex after the append it observed is complete and
        // recorded, so the state behind it is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn io(&self, source: io::Error) -> StoreError {
        io_error(&self.log_path)(source)
    }
}

impl MetadataStore for FileMetadataStore {
    fn append(&self, records: &[MetadataRecord]) -> Result<Offset, StoreError> {
        let mut frame = Vec::new();
        format::encode_frame(records, &mut frame)
            .map_err(|e| self.io(io::Error::new(io::ErrorKind::InvalidInput, e)))?;

        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Health::Failed { reason } = &inner.health {
            return Err(self.io(io::Error::other(format!(
                "store refuses writes after an earlier failure ({reason}); reopen it to recover"
            ))));
        }
        let first = inner.records.len() as Offset;
        if records.is_empty() {
            return Ok(first);
        }

        if let Err(e) = write_at(&mut inner.file, inner.end, &frame) {
            // Cut off whatever part of the frame made it into the file, so that the next frame
            // follows intact data. If even that fails, the end of the file is unknown.
            if let Err(trim) = inner.file.set_len(inner.end) {
                inner.health = Health::Failed {
                    reason: format!("write failed ({e}) and could not be undone ({trim})"),
                };
            }
            return Err(self.io(e));
        }
        // Acknowledge only what is on stable storage: recovery relies on it (see `recover`).
        if let Err(e) = inner.sync_data() {
            inner.health = Health::Failed {
                reason: format!("fsync failed ({e})"),
            };
            return Err(self.io(e));
        }
        inner.end += frame.len() as u64;
        inner.records.extend_from_slice(records);
        for record in records {
            for listener in &inner.listeners {
                listener(record);
            }
        }
        Ok(first)
    }

    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError> {
        Ok(self.lock().records.clone())
    }
}

impl Inner {
    /// `fsync`s appended data (and the file length that makes it readable).
    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        #[cfg(test)]
        {
            self.syncs += 1;
        }
        Ok(())
    }
}

impl fmt::Debug for FileMetadataStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("FileMetadataStore")
            .field("path", &self.log_path)
            .field("records", &inner.records.len())
            .field("bytes", &inner.end)
            .field("writable", &matches!(inner.health, Health::Writable))
            .finish_non_exhaustive()
    }
}

/// Opens the log, verifies it, cuts off a torn tail and writes the header of a new file.
/// Returns the file, the end of the intact log and its records.
fn recover(dir: &Path, log_path: &Path) -> Result<(File, u64, Vec<MetadataRecord>), StoreError> {
    let io = io_error(log_path);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(log_path)
        .map_err(&io)?;
    let mut image = Vec::new();
    file.read_to_end(&mut image).map_err(&io)?;

    let scan = format::scan(&image).map_err(|damage| StoreError::Corrupt {
        path: log_path.display().to_string(),
        offset: damage.offset,
        reason: damage.reason,
    })?;

    let mut changed = false;
    if let Tail::Torn { offset, reason } = scan.tail {
        // Why cutting this off loses nothing: `append` acknowledges a frame only after fsync,
        // and each append is one frame written at the end of the log. So a frame that is
        // incomplete (its length runs past EOF, or it is the very last frame and its checksum
        // fails) is the remains of a write that was in flight when the process or machine died,
        // and that no caller was ever told had succeeded. `format::scan` only calls a tail torn
        // when it reaches EOF with no intact frame after it; anything else is `Corrupt`.
        tracing::warn!(
            path = %log_path.display(),
            offset,
            dropped_bytes = image.len() as u64 - scan.valid_len,
            %reason,
            "metadata log ends in an incomplete write that was never acknowledged; truncating it"
        );
        file.set_len(scan.valid_len).map_err(&io)?;
        changed = true;
    }
    let mut end = scan.valid_len;
    if end == 0 {
        // A new file (or one whose header write never completed).
        let header = format::file_header();
        write_at(&mut file, 0, &header).map_err(&io)?;
        end = header.len() as u64;
        changed = true;
    }
    if changed {
        file.sync_all().map_err(&io)?;
        // Make the file's directory entry durable too, or a crash could lose the whole file.
        sync_dir(dir)?;
    }
    Ok((file, end, scan.records))
}

fn write_at(file: &mut File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(bytes)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<(), StoreError> {
    // Directories cannot be opened for syncing here; the file system orders the entry itself.
    Ok(())
}

fn io_error(path: &Path) -> impl Fn(io::Error) -> StoreError + '_ {
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
    fn every_nonempty_append_is_fsynced_before_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileMetadataStore::open(dir.path()).unwrap();
        assert_eq!(store.lock().syncs, 0);
        store.append(&[removal("a")]).unwrap();
        assert_eq!(store.lock().syncs, 1);
        store.append(&[removal("b"), removal("c")]).unwrap();
        assert_eq!(store.lock().syncs, 2);
        // Nothing to write, nothing to sync.
        assert_eq!(store.append(&[]).unwrap(), 3);
        assert_eq!(store.lock().syncs, 2);
    }

    #[test]
    fn a_failed_store_refuses_appends() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileMetadataStore::open(dir.path()).unwrap();
        store.lock().health = Health::Failed {
            reason: "fsync failed (test)".to_owned(),
        };
        let err = store.append(&[removal("a")]).unwrap_err();
        assert!(err.to_string().contains("reopen"), "{err}");
        assert!(store.snapshot().unwrap().is_empty());
    }
}
