//! The commit record: what the store has acknowledged, kept beside the log in
//! `<data_dir>/metadata.committed`.
//!
//! A damaged last frame and a write cut short by a crash look the same from inside the log, so
//! the log alone cannot tell an acknowledged record that was damaged from one that was never
//! acknowledged. The commit record can: after every group of appends is durable in the log, the
//! store writes `(generation, committed length)` here and syncs it, and only then tells the
//! writers their records are durable. On open, everything up to the committed length must be
//! intact (otherwise the store refuses to start), and only what lies beyond it may be cut off.
//!
//! ```text
//! file = slot slot                       (two 32-byte slots, written alternately)
//! slot = sequence u64 | generation u64 | committed_len u64 | crc32c u32 | zero u32
//! ```
//!
//! Writing the slot the previous commit did *not* use means a torn write damages only the newest
//! slot, and the other one still holds the previous commit (which is what was acknowledged: the
//! torn commit's writers were never answered).

use std::fs::File;
use std::io;

use crate::format::{read_u32, read_u64};

/// The file name inside the data directory.
pub const COMMIT_FILE_NAME: &str = "metadata.committed";
/// The length of one slot.
const SLOT_LEN: usize = 32;

/// One commit: the log of generation `generation` is acknowledged up to `committed_len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Commit {
    /// Increases with every commit; picks the newer slot.
    pub(crate) sequence: u64,
    /// The log file generation it describes.
    pub(crate) generation: u64,
    /// How many bytes of that file are acknowledged.
    pub(crate) committed_len: u64,
}

impl Commit {
    pub(crate) fn encode(&self) -> [u8; SLOT_LEN] {
        let mut body = Vec::with_capacity(SLOT_LEN);
        body.extend_from_slice(&self.sequence.to_be_bytes());
        body.extend_from_slice(&self.generation.to_be_bytes());
        body.extend_from_slice(&self.committed_len.to_be_bytes());
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(&crc.to_be_bytes());
        body.extend_from_slice(&[0u8; 4]);
        let mut out = [0u8; SLOT_LEN];
        for (o, b) in out.iter_mut().zip(body) {
            *o = b;
        }
        out
    }

    fn decode(slot: &[u8]) -> Option<Commit> {
        let (sequence, generation, committed_len, crc) = (
            read_u64(slot, 0)?,
            read_u64(slot, 8)?,
            read_u64(slot, 16)?,
            read_u32(slot, 24)?,
        );
        let computed = crc32c::crc32c(slot.get(..24)?);
        (computed == crc && sequence > 0).then_some(Commit {
            sequence,
            generation,
            committed_len,
        })
    }

    /// The commit that follows this one.
    pub(crate) fn next(&self, generation: u64, committed_len: u64) -> Commit {
        Commit {
            sequence: self.sequence + 1,
            generation,
            committed_len,
        }
    }
}

/// The newest valid commit in the file's bytes, if any slot is valid.
pub(crate) fn read(bytes: &[u8]) -> Option<Commit> {
    let a = bytes.get(..SLOT_LEN).and_then(Commit::decode);
    let b = bytes.get(SLOT_LEN..2 * SLOT_LEN).and_then(Commit::decode);
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.sequence >= b.sequence { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Writes `commit` into its slot and syncs the file. Returns only once it is durable.
pub(crate) fn write(file: &File, commit: &Commit) -> io::Result<()> {
    let slot = (commit.sequence % 2) * SLOT_LEN as u64;
    write_at(file, slot, &commit.encode())?;
    file.sync_data()
}

#[cfg(unix)]
fn write_at(file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, offset)
}

#[cfg(not(unix))]
fn write_at(file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_valid_slot_wins_and_a_torn_slot_falls_back() {
        let c1 = Commit {
            sequence: 1,
            generation: 1,
            committed_len: 32,
        };
        let c2 = c1.next(1, 100);
        let mut bytes = vec![0u8; 64];
        bytes[32..64].copy_from_slice(&c1.encode());
        assert_eq!(read(&bytes), Some(c1));
        bytes[0..32].copy_from_slice(&c2.encode());
        assert_eq!(read(&bytes), Some(c2));
        // A torn write of the newest slot leaves the previous commit.
        bytes[20] ^= 0xff;
        assert_eq!(read(&bytes), Some(c1));
        assert_eq!(read(&[]), None);
        assert_eq!(read(&[0u8; 64]), None);
    }
}
