//! Reading a data directory back: which bytes of the log were acknowledged, whether they are
//! intact, and what lies beyond them.
//!
//! The rules (the commit record is described in `commit.rs`, the header in `format.rs`):
//!
//! | log header generation `g`, commit record generation `c` | acknowledged length          |
//! |----------------------------------------------------------|------------------------------|
//! | `c == g`                                                 | the commit record's length   |
//! | `c + 1 == g` (a compaction's rename happened, its commit did not) | the header's `base_len` |
//! | anything else                                            | refused: the files do not belong together |
//!
//! - Everything up to the acknowledged length must be whole, intact frames; damage there, even in
//!   the very last frame, refuses the open ([`StoreError::Corrupt`]) — cutting it off would
//!   silently undo an acknowledged change (a credential removal, an ACL change).
//! - A log shorter than the acknowledged length refuses the open ([`StoreError::Lost`]).
//! - Bytes beyond it are writes that were never acknowledged: a node opening the store for writing
//!   saves them aside (`metadata.log.dropped-<ms>`), logs what it dropped and cuts them off; a
//!   reader ignores them (they may be an append in progress).

use portcullis::store::{StoreError, StoredRecord};

use crate::commit::Commit;
use crate::format::{self, FileKind, Header, HEADER_LEN, MAGIC};
use crate::legacy;

/// What a log image and its commit record say.
#[derive(Debug)]
pub(crate) enum Analysis {
    /// No log yet (or one whose creation never completed): a new store.
    New,
    /// A version-1 log from an earlier build: its records (offsets 0, 1, …), where its intact
    /// part ends and how long the image is.
    Legacy {
        records: Vec<StoredRecord>,
        valid_len: u64,
        image_len: u64,
        /// Why the bytes after `valid_len` were not read, if there are any.
        torn: Option<String>,
    },
    /// A version-2 log.
    Current(Current),
}

/// A version-2 log that may be opened.
#[derive(Debug)]
pub(crate) struct Current {
    pub(crate) header: Header,
    /// Where the acknowledged part ends.
    pub(crate) committed_len: u64,
    /// Whether the commit record must be brought up to the header's generation.
    pub(crate) commit_behind: bool,
    /// Every acknowledged record, in log order.
    pub(crate) records: Vec<StoredRecord>,
    /// How many bytes lie beyond the acknowledged part.
    pub(crate) unacknowledged: u64,
}

/// Analyses a log image against its commit record. `path` names the log in errors.
pub(crate) fn analyse(
    path: &str,
    image: &[u8],
    commit: Option<Commit>,
) -> Result<Analysis, StoreError> {
    let corrupt = |offset: u64, reason: String| StoreError::Corrupt {
        path: path.to_owned(),
        offset,
        reason,
    };
    if image.is_empty() || (image.len() < HEADER_LEN && looks_like_an_unfinished_header(image)) {
        return match commit {
            Some(c) if c.committed_len > 0 => Err(StoreError::Lost {
                path: path.to_owned(),
                committed: c.committed_len,
                found: image.len() as u64,
            }),
            _ => Ok(Analysis::New),
        };
    }
    let kind = format::read_header(image).map_err(|d| corrupt(d.offset, d.reason))?;
    let header = match kind {
        FileKind::V1 => {
            if commit.is_some_and(|c| c.generation > 0) {
                return Err(corrupt(
                    0,
                    "a version-1 log next to a commit record of a version-2 log: the log was replaced"
                        .to_owned(),
                ));
            }
            let scan = legacy::scan(image).map_err(|d| corrupt(d.offset, d.reason))?;
            let records = scan
                .records
                .into_iter()
                .enumerate()
                .map(|(i, record)| StoredRecord {
                    offset: i as u64,
                    record,
                })
                .collect();
            let torn = match scan.tail {
                legacy::Tail::Torn { reason, .. } => Some(reason.to_string()),
                legacy::Tail::Clean => None,
            };
            return Ok(Analysis::Legacy {
                records,
                valid_len: scan.valid_len,
                image_len: image.len() as u64,
                torn,
            });
        }
        FileKind::V2(header) => header,
    };
    let (committed_len, commit_behind) = match commit {
        None => {
            // The commit record is written right after a new log's header is durable, before any
            // append; without it only a log that never held a record can be trusted.
            if header.generation == 1
                && header.base_len == HEADER_LEN as u64
                && image.len() == HEADER_LEN
            {
                (HEADER_LEN as u64, true)
            } else {
                return Err(corrupt(
                    0,
                    format!(
                        "the commit record ({}) is missing or unreadable, so what was acknowledged cannot be known",
                        crate::commit::COMMIT_FILE_NAME
                    ),
                ));
            }
        }
        Some(c) if c.generation == header.generation => (c.committed_len, false),
        Some(c) if c.generation + 1 == header.generation => (header.base_len, true),
        Some(c) => {
            return Err(corrupt(
                0,
                format!(
                    "the log is generation {} but the commit record describes generation {}: the files do not belong together",
                    header.generation, c.generation
                ),
            ))
        }
    };
    if committed_len < header.base_len || committed_len < HEADER_LEN as u64 {
        return Err(corrupt(
            0,
            format!(
                "the commit record's length {committed_len} is shorter than the log's own base length {}",
                header.base_len
            ),
        ));
    }
    if (image.len() as u64) < committed_len {
        return Err(StoreError::Lost {
            path: path.to_owned(),
            committed: committed_len,
            found: image.len() as u64,
        });
    }
    let end = usize::try_from(committed_len).unwrap_or(usize::MAX);
    let mut records = Vec::new();
    format::read_frames(image, HEADER_LEN, end, |frame| records.extend(frame))
        .map_err(|d| corrupt(d.offset, d.reason))?;
    Ok(Analysis::Current(Current {
        header,
        committed_len,
        commit_behind,
        records,
        unacknowledged: image.len() as u64 - committed_len,
    }))
}

/// A header write cut short by a crash: a prefix of the magic, or zeros.
fn looks_like_an_unfinished_header(image: &[u8]) -> bool {
    image.iter().all(|&b| b == 0)
        || MAGIC.starts_with(
            image
                .get(..MAGIC.len().min(image.len()))
                .unwrap_or_default(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::credentials::ScramMechanism;
    use portcullis::store::MetadataRecord;

    fn removal(user: &str) -> MetadataRecord {
        MetadataRecord::RemoveScramCredential {
            user: user.to_owned(),
            mechanism: ScramMechanism::Sha256,
        }
    }

    fn log(generation: u64, frames: &[&[MetadataRecord]]) -> Vec<u8> {
        let mut out = Header {
            generation,
            base_len: HEADER_LEN as u64,
        }
        .encode()
        .to_vec();
        let mut offset = 0;
        for f in frames {
            format::encode_frame(offset, f, &mut out).unwrap();
            offset += f.len() as u64;
        }
        out
    }

    fn commit(generation: u64, len: usize) -> Option<Commit> {
        Some(Commit {
            sequence: 3,
            generation,
            committed_len: len as u64,
        })
    }

    #[test]
    fn a_bit_flip_in_the_last_acknowledged_frame_refuses_the_open() {
        let img = log(1, &[&[removal("a")], &[removal("b")]]);
        for at in HEADER_LEN..img.len() {
            let mut bad = img.clone();
            bad[at] ^= 0x04;
            let err = analyse("log", &bad, commit(1, img.len())).unwrap_err();
            assert!(
                matches!(err, StoreError::Corrupt { .. }),
                "flip at {at}: {err}"
            );
        }
    }

    #[test]
    fn a_truncation_anywhere_refuses_the_open() {
        let img = log(1, &[&[removal("a")], &[removal("b")]]);
        for cut in 0..img.len() {
            let err = analyse("log", &img[..cut], commit(1, img.len())).unwrap_err();
            assert!(
                matches!(err, StoreError::Lost { .. } | StoreError::Corrupt { .. }),
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn bytes_beyond_the_commit_are_unacknowledged() {
        let acked = log(1, &[&[removal("a")]]);
        let img = log(1, &[&[removal("a")], &[removal("b")]]);
        let Analysis::Current(c) =
            analyse("log", &img[..img.len() - 3], commit(1, acked.len())).unwrap()
        else {
            panic!("expected a current log")
        };
        assert_eq!(c.records.len(), 1);
        assert_eq!(c.unacknowledged, (img.len() - 3 - acked.len()) as u64);
    }

    #[test]
    fn generations_must_match_or_be_one_compaction_apart() {
        let img = log(4, &[&[removal("a")]]);
        let Analysis::Current(c) = analyse("log", &img, commit(3, 999)).unwrap() else {
            panic!()
        };
        // One behind: the header's base length counts (here only the header itself).
        assert!(c.commit_behind);
        assert_eq!(c.committed_len, HEADER_LEN as u64);
        assert!(analyse("log", &img, commit(2, img.len())).is_err());
        assert!(analyse("log", &img, commit(5, img.len())).is_err());
    }

    #[test]
    fn a_missing_commit_record_is_only_fine_for_an_empty_new_log() {
        let empty = log(1, &[]);
        assert!(matches!(
            analyse("log", &empty, None).unwrap(),
            Analysis::Current(Current {
                commit_behind: true,
                ..
            })
        ));
        let img = log(1, &[&[removal("a")]]);
        assert!(analyse("log", &img, None).is_err());
        assert!(matches!(
            analyse("log", b"PCLS", None).unwrap(),
            Analysis::New
        ));
        assert!(matches!(
            analyse("log", &[], commit(1, 32)),
            Err(StoreError::Lost { .. })
        ));
    }
}
