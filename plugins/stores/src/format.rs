//! The on-disk format of the metadata log (version 2), without any I/O: the file header, encoding
//! one frame, and reading frames back.
//!
//! ```text
//! file    = header frame*
//! header  = magic "PCLSMLOG" | version u32 (2) | generation u64 | base_len u64 | crc32c u32  (32 bytes, big-endian)
//! frame   = length u32 | crc32c(payload) u32 | payload
//! payload = JSON {"offset": first record's offset, "records": [MetadataRecord, ...]}
//! ```
//!
//! - One frame holds one whole atomic batch: a crash can leave a partial *frame*, never a partial
//!   batch. The records of a frame have consecutive offsets starting at `offset`.
//! - `generation` counts the files the store has had: compaction writes the live records into a
//!   new file of the next generation and renames it over the old one.
//! - `base_len` is the length of the file when it became the log (its header for a new log; the
//!   compacted records plus the tail copied after them for a compacted one): everything up to it
//!   was durable before the file was renamed into place, so it counts as acknowledged even before
//!   the commit record names the new generation (see `commit.rs`).

use portcullis::store::{MetadataRecord, Offset, StoredRecord};

/// Identifies a Portcullis metadata log.
pub(crate) const MAGIC: [u8; 8] = *b"PCLSMLOG";
/// The format version this build writes.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The length of a version-2 header.
pub(crate) const HEADER_LEN: usize = 32;
/// Length plus checksum.
pub(crate) const FRAME_HEADER_LEN: usize = 8;
/// The largest payload a frame may carry. A length field above this is damage, never a reason
/// to allocate: reading only ever slices the file image already in memory.
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// A version-2 file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// Which file of the store this is (1 for the first, +1 per compaction).
    pub(crate) generation: u64,
    /// How long the file was when it became the log.
    pub(crate) base_len: u64,
}

impl Header {
    /// The header's bytes.
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let mut body = Vec::with_capacity(HEADER_LEN);
        body.extend_from_slice(&MAGIC);
        body.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
        body.extend_from_slice(&self.generation.to_be_bytes());
        body.extend_from_slice(&self.base_len.to_be_bytes());
        body.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        for (o, b) in out.iter_mut().zip(body) {
            *o = b;
        }
        out
    }
}

/// What the first bytes of a log file are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// A version-2 log with this header.
    V2(Header),
    /// A version-1 log (written by earlier builds; read once, then rewritten as version 2).
    V1,
}

/// Reads the header of a log image.
pub(crate) fn read_header(image: &[u8]) -> Result<FileKind, Damage> {
    if image.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
        return Err(damage(0, "bad magic: not a Portcullis metadata log"));
    }
    match read_u32(image, MAGIC.len()) {
        Some(1) => Ok(FileKind::V1),
        Some(FORMAT_VERSION) => {
            let (Some(generation), Some(base_len), Some(crc)) =
                (read_u64(image, 12), read_u64(image, 20), read_u32(image, 28))
            else {
                return Err(damage(0, "incomplete file header"));
            };
            let computed = image.get(..28).map(crc32c::crc32c).unwrap_or(0);
            if computed != crc {
                return Err(damage(0, "file header checksum mismatch"));
            }
            Ok(FileKind::V2(Header {
                generation,
                base_len,
            }))
        }
        Some(version) => Err(damage(
            MAGIC.len(),
            format!("unsupported format version {version} (this build reads versions 1 and {FORMAT_VERSION})"),
        )),
        None => Err(damage(0, "incomplete file header")),
    }
}

/// Why a batch cannot be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EncodeError {
    /// The batch serializes to more than [`MAX_BATCH_BYTES`].
    #[error("record batch is {len} bytes, above the {MAX_BATCH_BYTES}-byte limit")]
    TooLarge { len: usize },
    /// serde_json refused a record (cannot happen for the current record types).
    #[error("record batch cannot be serialized: {0}")]
    Serialize(#[from] serde_json::Error),
}

#[derive(serde::Serialize)]
struct PayloadOut<'a> {
    offset: Offset,
    records: &'a [MetadataRecord],
}

#[derive(serde::Deserialize)]
struct PayloadIn {
    offset: Offset,
    records: Vec<MetadataRecord>,
}

/// Appends one frame holding `records` (at offsets `offset`, `offset + 1`, …) to `out`.
pub(crate) fn encode_frame(
    offset: Offset,
    records: &[MetadataRecord],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let payload = serde_json::to_vec(&PayloadOut { offset, records })?;
    if payload.len() > MAX_BATCH_BYTES {
        return Err(EncodeError::TooLarge { len: payload.len() });
    }
    // Cannot fail: MAX_BATCH_BYTES fits in a u32.
    let len =
        u32::try_from(payload.len()).map_err(|_| EncodeError::TooLarge { len: payload.len() })?;
    out.reserve(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// Damage: what is wrong and where, without any record content (records hold credentials).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Damage {
    /// The byte offset where the damage starts.
    pub(crate) offset: u64,
    /// What is wrong.
    pub(crate) reason: String,
}

/// One intact frame.
pub(crate) struct Frame {
    /// Its records with their offsets.
    pub(crate) records: Vec<StoredRecord>,
    /// Its length in the file, header included.
    pub(crate) len: usize,
}

/// Why the bytes at a position are not an intact frame.
#[derive(Debug)]
pub(crate) enum FrameFault {
    /// Fewer bytes than the frame needs: what a write cut short looks like.
    Short,
    /// The bytes are there but wrong (checksum, length, content).
    Bad(String),
}

/// Reads the frame at the start of `rest`.
pub(crate) fn read_frame(rest: &[u8]) -> Result<Frame, FrameFault> {
    let (Some(len), Some(stored_crc)) = (read_u32(rest, 0), read_u32(rest, 4)) else {
        return Err(FrameFault::Short);
    };
    // Checked before anything else, so a wild length never sizes an allocation.
    let len = len as usize;
    if len > MAX_BATCH_BYTES {
        return Err(FrameFault::Bad(format!(
            "record length {len} exceeds the {MAX_BATCH_BYTES}-byte maximum"
        )));
    }
    if len == 0 {
        return Err(FrameFault::Bad("zero-length record".to_owned()));
    }
    let frame_len = FRAME_HEADER_LEN + len;
    let Some(payload) = rest.get(FRAME_HEADER_LEN..frame_len) else {
        return Err(FrameFault::Short);
    };
    let computed_crc = crc32c::crc32c(payload);
    if computed_crc != stored_crc {
        return Err(FrameFault::Bad(format!(
            "checksum mismatch (stored {stored_crc:#010x}, computed {computed_crc:#010x})"
        )));
    }
    // The checksum matches, so these are the bytes that were written: if they do not parse, the
    // log was written by something else (or a newer build).
    let parsed: PayloadIn = serde_json::from_slice(payload).map_err(|e| {
        // Only the position and the category: serde's message may quote record content.
        FrameFault::Bad(format!(
            "unparseable record payload ({:?} error at line {} column {})",
            e.classify(),
            e.line(),
            e.column()
        ))
    })?;
    if parsed.records.is_empty() {
        return Err(FrameFault::Bad("empty record batch".to_owned()));
    }
    let records = parsed
        .records
        .into_iter()
        .enumerate()
        .map(|(i, record)| StoredRecord {
            offset: parsed.offset + i as Offset,
            record,
        })
        .collect();
    Ok(Frame {
        records,
        len: frame_len,
    })
}

/// Reads every frame of `image[start..end]`, which must be whole, intact frames ending exactly at
/// `end`, with offsets that only grow. Calls `each` with each frame's records.
pub(crate) fn read_frames(
    image: &[u8],
    start: usize,
    end: usize,
    mut each: impl FnMut(Vec<StoredRecord>),
) -> Result<(), Damage> {
    let mut pos = start;
    let mut next_min: Offset = 0;
    while pos < end {
        let rest = image.get(pos..end).unwrap_or_default();
        match read_frame(rest) {
            Ok(frame) => {
                let first = frame.records.first().map_or(0, |r| r.offset);
                if first < next_min {
                    return Err(damage(
                        pos,
                        format!(
                            "record offset {first} does not follow offset {}",
                            next_min.saturating_sub(1)
                        ),
                    ));
                }
                next_min = frame.records.last().map_or(next_min, |r| r.offset + 1);
                pos += frame.len;
                each(frame.records);
            }
            Err(FrameFault::Short) => {
                return Err(damage(pos, "the last acknowledged record is incomplete"))
            }
            Err(FrameFault::Bad(reason)) => return Err(damage(pos, reason)),
        }
    }
    Ok(())
}

pub(crate) fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let field: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(field))
}

pub(crate) fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let field: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_be_bytes(field))
}

pub(crate) fn damage(offset: usize, reason: impl Into<String>) -> Damage {
    Damage {
        offset: offset as u64,
        reason: reason.into(),
    }
}

/// Records per frame in a compacted log (well below the batch size limit).
const RECORDS_PER_FRAME: usize = 512;

/// Appends `records` as frames of consecutive offsets to `out`.
pub(crate) fn encode_runs(records: &[StoredRecord], out: &mut Vec<u8>) -> std::io::Result<()> {
    let mut run: Vec<MetadataRecord> = Vec::new();
    let mut run_start: Offset = 0;
    let flush = |run: &mut Vec<_>, start: Offset, out: &mut Vec<u8>| -> std::io::Result<()> {
        if !run.is_empty() {
            encode_frame(start, run, out)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            run.clear();
        }
        Ok(())
    };
    for r in records {
        let contiguous = run_start + run.len() as Offset == r.offset;
        if !contiguous || run.len() >= RECORDS_PER_FRAME {
            flush(&mut run, run_start, out)?;
            run_start = r.offset;
        }
        run.push(r.record.clone());
    }
    flush(&mut run, run_start, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::credentials::ScramMechanism;

    fn removal(user: &str) -> MetadataRecord {
        MetadataRecord::RemoveScramCredential {
            user: user.to_owned(),
            mechanism: ScramMechanism::Sha256,
        }
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = Header {
            generation: 7,
            base_len: 1234,
        };
        let mut bytes = h.encode().to_vec();
        assert_eq!(read_header(&bytes).unwrap(), FileKind::V2(h));
        bytes[15] ^= 1;
        assert!(read_header(&bytes).is_err());
    }

    #[test]
    fn frames_keep_their_offsets() {
        let mut img = vec![0u8; 4];
        encode_frame(5, &[removal("a"), removal("b")], &mut img).unwrap();
        encode_frame(9, &[removal("c")], &mut img).unwrap();
        let mut seen = Vec::new();
        read_frames(&img, 4, img.len(), |rs| {
            seen.extend(rs.into_iter().map(|r| r.offset))
        })
        .unwrap();
        assert_eq!(seen, vec![5, 6, 9]);
    }

    #[test]
    fn going_backwards_in_offsets_is_damage() {
        let mut img = Vec::new();
        encode_frame(5, &[removal("a")], &mut img).unwrap();
        let second = img.len();
        encode_frame(5, &[removal("b")], &mut img).unwrap();
        let err = read_frames(&img, 0, img.len(), |_| {}).unwrap_err();
        assert_eq!(err.offset, second as u64);
    }

    #[test]
    fn a_cut_or_flipped_frame_is_damage_inside_the_committed_range() {
        let mut img = Vec::new();
        encode_frame(0, &[removal("a")], &mut img).unwrap();
        for cut in 1..img.len() {
            assert!(
                read_frames(&img[..cut], 0, cut, |_| {}).is_err(),
                "cut {cut}"
            );
        }
        for at in 0..img.len() {
            let mut bad = img.clone();
            bad[at] ^= 0x10;
            assert!(
                read_frames(&bad, 0, bad.len(), |_| {}).is_err(),
                "flip {at}"
            );
        }
    }
}
