//! Version 1 of the on-disk format (builds before the commit record), read once to convert a log
//! to version 2 (`format.rs`): scanning a whole file image back into records.
//!
//! Version 1 had no record of what was acknowledged, so a damaged last frame could not be told
//! from a torn write and was cut off; the conversion keeps that rule for these files only, and
//! saves what it cuts off.
//!
//! ```text
//! file   = header frame*
//! header = magic (8 bytes, "PCLSMLOG") | format version (u32, big-endian)
//! frame  = length (u32 BE) | crc32c of payload (u32 BE) | payload (length bytes)
//! payload = JSON array of MetadataRecord: the records of one `append` call
//! ```
//!
//! One frame holds one whole `append` batch, so a batch is all-or-nothing on disk: a crash in the
//! middle of a write can only leave a partial *frame*, never a partial batch.

use portcullis::store::MetadataRecord;

/// Identifies a Portcullis metadata log.
pub(crate) const MAGIC: [u8; 8] = *b"PCLSMLOG";
/// The only format version this build reads and writes.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Magic plus version.
pub(crate) const HEADER_LEN: usize = 12;
/// Length plus checksum.
const FRAME_HEADER_LEN: usize = 8;
use crate::format::MAX_BATCH_BYTES;

/// The file header.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn file_header() -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    let (magic, version) = header.split_at_mut(MAGIC.len());
    magic.copy_from_slice(&MAGIC);
    version.copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    header
}

/// Why a batch cannot be written.
#[cfg(test)]
#[derive(Debug, thiserror::Error)]
pub(crate) enum EncodeError {
    /// The batch serializes to more than [`MAX_BATCH_BYTES`].
    #[error("record batch is {len} bytes, above the {MAX_BATCH_BYTES}-byte limit")]
    TooLarge { len: usize },
    /// serde_json refused a record (cannot happen for the current record types).
    #[error("record batch cannot be serialized: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Appends one frame holding `records` to `out` (tests write version-1 logs with it).
#[cfg(test)]
pub(crate) fn encode_frame(
    records: &[MetadataRecord],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let payload = serde_json::to_vec(records)?;
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

/// The result of scanning a log image that is not corrupt.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Every record of every intact frame, in order.
    pub(crate) records: Vec<MetadataRecord>,
    /// The length of the intact prefix. 0 means not even the header is intact (a new file).
    pub(crate) valid_len: u64,
    /// What follows the intact prefix.
    pub(crate) tail: Tail,
}

/// What follows the intact prefix of the log.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Nothing: the file ends on a frame boundary.
    Clean,
    /// The remains of a write that never completed, starting at `offset`.
    Torn { offset: u64, reason: TornReason },
}

/// How a torn tail was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TornReason {
    /// The file is shorter than the header, and what is there is the start of the header.
    PartialFileHeader,
    /// Fewer than 8 bytes follow the last frame.
    PartialFrameHeader,
    /// The last frame's length runs past the end of the file, and no intact frame follows.
    LengthPastEof,
    /// The last frame is complete in length but its checksum fails, and nothing follows it.
    LastChecksumMismatch,
    /// Everything from here to the end is zero bytes (some file systems fill the unwritten end
    /// of a file with zeros after a crash).
    ZeroFilled,
}

impl std::fmt::Display for TornReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TornReason::PartialFileHeader => "partial file header",
            TornReason::PartialFrameHeader => "partial record header",
            TornReason::LengthPastEof => "record length runs past the end of the file",
            TornReason::LastChecksumMismatch => "checksum mismatch in the last record",
            TornReason::ZeroFilled => "zero-filled tail",
        })
    }
}

/// Damage the node must not start on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Damage {
    /// The byte offset where the damage starts (the start of the bad frame, or of the header field).
    pub(crate) offset: u64,
    /// What is wrong, without any record content (records hold credentials).
    pub(crate) reason: String,
}

/// Scans a whole log image.
///
/// The rule that separates a torn tail from damage: a torn tail can only be the remains of the
/// **last** write, so it must reach the end of the file and no intact frame may follow it. Any bad
/// frame with intact data after it is damage.
pub(crate) fn scan(image: &[u8]) -> Result<Scan, Damage> {
    let header = file_header();
    let Some(body) = image.get(HEADER_LEN..) else {
        // Shorter than the header: the header write of a brand-new file never completed, or the
        // file is not ours.
        let tail = if image.is_empty() {
            Tail::Clean
        } else if header.starts_with(image) {
            torn(0, TornReason::PartialFileHeader)
        } else if all_zero(image) {
            torn(0, TornReason::ZeroFilled)
        } else {
            return Err(damage(0, "bad magic: not a Portcullis metadata log"));
        };
        return Ok(Scan {
            records: Vec::new(),
            valid_len: 0,
            tail,
        });
    };
    if image.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
        if all_zero(image) {
            // We fsync the header before the first append, so a zero-filled file never held an
            // acknowledged record.
            return Ok(Scan {
                records: Vec::new(),
                valid_len: 0,
                tail: torn(0, TornReason::ZeroFilled),
            });
        }
        return Err(damage(0, "bad magic: not a Portcullis metadata log"));
    }
    let version = read_u32(image, MAGIC.len()).unwrap_or(0);
    if version != FORMAT_VERSION {
        return Err(damage(
            MAGIC.len(),
            format!(
                "unsupported format version {version} (this build reads version {FORMAT_VERSION})"
            ),
        ));
    }

    let mut records = Vec::new();
    let mut pos = HEADER_LEN;
    let mut rest = body;
    while !rest.is_empty() {
        match read_frame(rest) {
            Ok((batch, frame_len)) => {
                records.extend(batch);
                pos += frame_len;
                rest = rest.get(frame_len..).unwrap_or_default();
            }
            Err(FrameFault::Torn(reason)) => {
                return Ok(Scan {
                    records,
                    valid_len: pos as u64,
                    tail: torn(pos, reason),
                })
            }
            Err(FrameFault::Damaged(_)) if all_zero(rest) => {
                return Ok(Scan {
                    records,
                    valid_len: pos as u64,
                    tail: torn(pos, TornReason::ZeroFilled),
                })
            }
            Err(FrameFault::Damaged(reason)) => return Err(damage(pos, reason)),
        }
    }
    Ok(Scan {
        records,
        valid_len: pos as u64,
        tail: Tail::Clean,
    })
}

/// Why the frame at the start of a slice could not be read.
enum FrameFault {
    /// It is (so far as we can tell) the incomplete last write.
    Torn(TornReason),
    /// It is damaged.
    Damaged(String),
}

/// Reads the frame at the start of `rest`: its records and its total length. A length that runs
/// past the end is told apart (torn last write, or damage with an intact frame after it).
fn read_frame(rest: &[u8]) -> Result<(Vec<MetadataRecord>, usize), FrameFault> {
    read_intact_frame(rest).map_err(|fault| match fault {
        // A length that runs past EOF is what a torn write looks like, but also what a damaged
        // length field in the middle of the log looks like. Only the former has no intact frame
        // after it.
        FrameFault::Torn(TornReason::LengthPastEof) => match intact_frame_after(rest) {
            Some(at) => FrameFault::Damaged(format!(
                "record length {} runs past the end of the file, but an intact record follows {at} bytes later",
                read_u32(rest, 0).unwrap_or_default()
            )),
            None => FrameFault::Torn(TornReason::LengthPastEof),
        },
        other => other,
    })
}

/// The frame at the start of `rest`, without looking further when its length runs past the end.
/// (The search for an intact frame after it checks each candidate with this, not with
/// [`read_frame`]: a candidate's own search would start another, and a few kilobytes of crafted
/// frames each running past the end took minutes — found by the `store_records` fuzz target.)
fn read_intact_frame(rest: &[u8]) -> Result<(Vec<MetadataRecord>, usize), FrameFault> {
    let (Some(len), Some(stored_crc)) = (read_u32(rest, 0), read_u32(rest, 4)) else {
        return Err(FrameFault::Torn(TornReason::PartialFrameHeader));
    };
    // Checked before anything else, so that a wild length can never look like a torn tail or
    // size an allocation.
    let len = len as usize;
    if len > MAX_BATCH_BYTES {
        return Err(FrameFault::Damaged(format!(
            "record length {len} exceeds the {MAX_BATCH_BYTES}-byte maximum"
        )));
    }
    if len == 0 {
        return Err(FrameFault::Damaged("zero-length record".to_owned()));
    }
    let frame_len = FRAME_HEADER_LEN + len;
    let Some(payload) = rest.get(FRAME_HEADER_LEN..frame_len) else {
        return Err(FrameFault::Torn(TornReason::LengthPastEof));
    };
    let computed_crc = crc32c::crc32c(payload);
    if computed_crc != stored_crc {
        return Err(if rest.len() == frame_len {
            FrameFault::Torn(TornReason::LastChecksumMismatch)
        } else {
            FrameFault::Damaged(format!(
                "checksum mismatch (stored {stored_crc:#010x}, computed {computed_crc:#010x}) with more data after the record"
            ))
        });
    }
    // The checksum matches, so these are the bytes we wrote: if they do not parse, the log was
    // written by something else (or a newer build) and truncating would destroy it.
    let batch: Vec<MetadataRecord> = serde_json::from_slice(payload).map_err(|e| {
        // Only the position and the category: serde's message may quote record content.
        FrameFault::Damaged(format!(
            "unparseable record payload ({:?} error at line {} column {})",
            e.classify(),
            e.line(),
            e.column()
        ))
    })?;
    if batch.is_empty() {
        return Err(FrameFault::Damaged("empty record batch".to_owned()));
    }
    Ok((batch, frame_len))
}

/// The distance from the start of `rest` to the first intact frame after the frame that starts
/// there, if any. Used only on the recovery path, so a linear search is fine.
fn intact_frame_after(rest: &[u8]) -> Option<usize> {
    (1..rest.len()).find(|&at| {
        rest.get(at..).is_some_and(|candidate| {
            // Every payload we write is a JSON array of objects; skip anything else cheaply
            // before checksumming.
            candidate.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + 2) == Some(b"[{".as_slice())
                && read_intact_frame(candidate).is_ok()
        })
    })
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let field: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(field))
}

fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

fn torn(offset: usize, reason: TornReason) -> Tail {
    Tail::Torn {
        offset: offset as u64,
        reason,
    }
}

fn damage(offset: usize, reason: impl Into<String>) -> Damage {
    Damage {
        offset: offset as u64,
        reason: reason.into(),
    }
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

    fn image(batches: &[&[MetadataRecord]]) -> (Vec<u8>, Vec<usize>) {
        let mut out = file_header().to_vec();
        let mut starts = Vec::new();
        for batch in batches {
            starts.push(out.len());
            encode_frame(batch, &mut out).unwrap();
        }
        (out, starts)
    }

    #[test]
    fn round_trip_keeps_batches_and_order() {
        let (img, _) = image(&[&[removal("a")], &[removal("b"), removal("c")]]);
        let scan = scan(&img).unwrap();
        assert_eq!(scan.records, vec![removal("a"), removal("b"), removal("c")]);
        assert_eq!(scan.valid_len, img.len() as u64);
        assert_eq!(scan.tail, Tail::Clean);
    }

    #[test]
    fn every_prefix_of_the_last_frame_is_a_torn_tail() {
        let (img, starts) = image(&[&[removal("a")], &[removal("b")]]);
        let last = starts[1];
        for cut in last + 1..img.len() {
            let scan = scan(&img[..cut]).unwrap();
            assert_eq!(scan.records, vec![removal("a")], "cut at {cut}");
            assert_eq!(scan.valid_len, last as u64, "cut at {cut}");
            assert!(matches!(scan.tail, Tail::Torn { offset, .. } if offset == last as u64));
        }
    }

    #[test]
    fn every_prefix_of_the_header_is_a_new_file() {
        for cut in 1..HEADER_LEN {
            let scan = scan(&file_header()[..cut]).unwrap();
            assert_eq!(scan.valid_len, 0);
            assert_eq!(scan.tail, torn(0, TornReason::PartialFileHeader));
        }
        assert_eq!(scan(&[]).unwrap().tail, Tail::Clean);
    }

    #[test]
    fn a_checksummed_but_unknown_record_is_damage_even_at_the_end() {
        let (mut img, _) = image(&[&[removal("a")]]);
        let at = img.len();
        let payload = br#"[{"type":"FromTheFuture"}]"#;
        img.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        img.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
        img.extend_from_slice(payload);
        let err = scan(&img).unwrap_err();
        assert_eq!(err.offset, at as u64);
        assert!(err.reason.contains("unparseable"), "{}", err.reason);
        assert!(
            !err.reason.contains("FromTheFuture"),
            "record content leaked: {}",
            err.reason
        );
    }

    /// Frames whose lengths all run past the end, each followed by what looks like the start of
    /// another: the search for an intact frame after the first checks each candidate once. (It
    /// used to read each candidate with the same search, one inside the other: the fuzz input
    /// that found it, 4.7 KB, took 45 s; 40 of these frames would not have finished.)
    #[test]
    fn frames_running_past_the_end_are_searched_once_not_one_search_inside_another() {
        let (mut img, _) = image(&[&[removal("a")]]);
        let first = img.len();
        for _ in 0..40 {
            img.extend_from_slice(&1_000_000u32.to_be_bytes());
            img.extend_from_slice(&[0; 4]);
            img.extend_from_slice(b"[{");
        }
        let scan = scan(&img).unwrap();
        assert_eq!(scan.records, vec![removal("a")]);
        assert_eq!(scan.tail, torn(first, TornReason::LengthPastEof));
        // An intact frame after them is still found, and makes the first one damage.
        let (tail, _) = image(&[&[removal("b")]]);
        img.extend_from_slice(&tail[HEADER_LEN..]);
        let err = super::scan(&img).unwrap_err();
        assert_eq!(err.offset, first as u64);
        assert!(
            err.reason.contains("an intact record follows"),
            "{}",
            err.reason
        );
    }
}
