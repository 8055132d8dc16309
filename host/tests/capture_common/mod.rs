//! A log writer the telemetry filtering tests read back.
#![allow(clippy::unwrap_used, reason = "a poisoned lock fails the test")]

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Everything written to it, shared by its clones (one per log line, as `MakeWriter` makes).
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// How often `needle` was written.
    pub fn count(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .matches(needle)
            .count()
    }
}
