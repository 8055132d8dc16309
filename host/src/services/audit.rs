//! The audit log file: lines appended from a writer thread of its own.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use portcullis::audit::AuditSink;

/// Appends audit lines to a file from a writer thread, so the request path never waits for the
/// disk. Lines that do not fit in the queue are counted and reported, never silently lost.
pub struct FileAuditSink {
    sender: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

impl FileAuditSink {
    /// Opens (appending) `path` and starts the writer thread.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (sender, receiver) = sync_channel::<String>(65_536);
        let dropped = Arc::new(AtomicU64::new(0));
        let reported = Arc::clone(&dropped);
        std::thread::Builder::new()
            .name("portcullis-audit".into())
            .spawn(move || {
                let mut out = BufWriter::new(file);
                let mut last_reported = 0;
                while let Ok(line) = receiver.recv() {
                    let _ = writeln!(out, "{line}");
                    // Flush when the queue is drained, so the file is current without a write per line.
                    while let Ok(line) = receiver.try_recv() {
                        let _ = writeln!(out, "{line}");
                    }
                    let _ = out.flush();
                    let now = reported.load(Ordering::Relaxed);
                    if now != last_reported {
                        tracing::warn!(dropped = now, "audit queue overflowed; lines were dropped");
                        last_reported = now;
                    }
                }
            })?;
        Ok(Self { sender, dropped })
    }
}

impl AuditSink for FileAuditSink {
    fn write_line(&self, line: String) {
        if let Err(TrySendError::Full(_)) = self.sender.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
