//! The data directory's file names and the file operations the store builds on: positioned
//! reads and writes, directory sync, reading a file that may be absent, saving bytes cut off the
//! log aside, and naming the path in an I/O error.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use portcullis::store::StoreError;

/// The log's file name inside the data directory.
pub const LOG_FILE_NAME: &str = "metadata.log";
/// The lock file's name inside the data directory.
pub const LOCK_FILE_NAME: &str = ".lock";
/// Where compaction writes the next generation before renaming it over the log.
pub const COMPACTING_FILE_NAME: &str = "metadata.log.compacting";
/// Prefix of the files that keep bytes cut off the end of the log (`<prefix><unix ms>`).
pub const DROPPED_FILE_PREFIX: &str = "metadata.log.dropped-";

/// Saves bytes about to be cut off the log next to it, durably, and returns the file's path.
pub(crate) fn save_dropped(dir: &Path, bytes: &[u8]) -> Result<PathBuf, StoreError> {
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

/// The file's bytes, or none if it does not exist.
pub(crate) fn read_if_exists(path: &Path) -> Result<Vec<u8>, StoreError> {
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
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

#[cfg(not(unix))]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
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

/// Takes the data directory's lock file (created if missing), without waiting: one writer per
/// directory, and recovery never truncates a log under a process that still appends to it. The
/// lock lasts as long as the returned file.
///
/// # Errors
/// [`StoreError::Locked`] when another process holds it; I/O errors.
pub(crate) fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    let lock_path = dir.join(LOCK_FILE_NAME);
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(io_error(&lock_path))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(TryLockError::WouldBlock) => Err(StoreError::Locked(dir.display().to_string())),
        Err(TryLockError::Error(e)) => Err(io_error(&lock_path)(e)),
    }
}
