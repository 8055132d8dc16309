//! Entry points for the fuzz targets in `fuzz/` (not an API: hidden from the documentation).
//!
//! A log file and its commit record are read back from disk at every start; damage (a bad disk, a
//! copy cut short, a file written by something else) must be refused with a clear error, never a
//! panic or an allocation sized by the file. The checksums keep random bytes from reaching the
//! record parser, so [`log_image`] frames arbitrary payloads with valid checksums, and the
//! target can reach the JSON of the records behind them.

use portcullis::store::{MetadataRecord, StoreError, StoredRecord};

use crate::format::{self, Header, HEADER_LEN};
use crate::recovery::{self, Analysis};

/// Opens `image` with `commit` (the commit file's bytes) as a node's start does, up to the point
/// where the records are known: the acknowledged records, or the error that refuses the start.
///
/// # Errors
/// The store's refusal (corrupt, lost).
pub fn analyse(commit: &[u8], image: &[u8]) -> Result<Vec<StoredRecord>, StoreError> {
    let commit = crate::commit::read(commit);
    match recovery::analyse("fuzz", image, commit)? {
        Analysis::New => Ok(Vec::new()),
        Analysis::Legacy { records, .. } => Ok(records),
        Analysis::Current(current) => Ok(current.records),
    }
}

/// A version-2 log of generation 1 whose frames carry `payloads` as they are (checksums right),
/// and the commit file that acknowledges all of it.
pub fn log_image<'a>(payloads: impl IntoIterator<Item = &'a [u8]>) -> (Vec<u8>, Vec<u8>) {
    let mut image = Header {
        generation: 1,
        base_len: HEADER_LEN as u64,
    }
    .encode()
    .to_vec();
    for payload in payloads {
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        image.extend_from_slice(&len.to_be_bytes());
        image.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
        image.extend_from_slice(payload);
    }
    (commit_for(&image), image)
}

/// A log of `records` as the store writes it (one frame per record), and its commit file.
pub fn encode_log(records: &[StoredRecord]) -> (Vec<u8>, Vec<u8>) {
    let mut image = Header {
        generation: 1,
        base_len: HEADER_LEN as u64,
    }
    .encode()
    .to_vec();
    for stored in records {
        let one: [MetadataRecord; 1] = [stored.record.clone()];
        // A record that decoded from a frame no larger than the limit encodes within it.
        if format::encode_frame(stored.offset, &one, &mut image).is_err() {
            return (Vec::new(), Vec::new());
        }
    }
    (commit_for(&image), image)
}

fn commit_for(image: &[u8]) -> Vec<u8> {
    let commit = crate::commit::Commit {
        sequence: 1,
        generation: 1,
        committed_len: image.len() as u64,
    };
    let mut bytes = commit.encode().to_vec();
    bytes.resize(64, 0);
    bytes
}
