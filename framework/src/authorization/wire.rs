//! Walking client request bodies with the bounds-checked [`Reader`], recording where each
//! per-resource entry lies so a partial denial can splice entries out without re-encoding a
//! byte of the client's data; and decoding/re-encoding (trusted) upstream responses.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use smallvec::SmallVec;

use crate::protocol::reader::{Malformed, Reader};

/// A cursor over a request body that knows the body's encoding (flexible or not).
pub(crate) struct Walk<'a> {
    body: &'a [u8],
    reader: Reader<'a>,
    len: usize,
    /// Whether this version uses compact types and tagged fields.
    pub(crate) flexible: bool,
}

impl<'a> Walk<'a> {
    pub(crate) fn new(body: &'a [u8], flexible: bool) -> Self {
        Self {
            body,
            reader: Reader::new(body),
            len: body.len(),
            flexible,
        }
    }

    /// The offset of the next byte.
    pub(crate) fn pos(&self) -> usize {
        self.len.saturating_sub(self.reader.remaining())
    }

    pub(crate) fn i8(&mut self) -> Result<i8, Malformed> {
        self.reader.i8()
    }
    pub(crate) fn i16(&mut self) -> Result<i16, Malformed> {
        self.reader.i16()
    }
    pub(crate) fn i32(&mut self) -> Result<i32, Malformed> {
        self.reader.i32()
    }
    pub(crate) fn i64(&mut self) -> Result<i64, Malformed> {
        self.reader.i64()
    }
    pub(crate) fn bool(&mut self) -> Result<bool, Malformed> {
        self.reader.bool()
    }
    pub(crate) fn uuid(&mut self) -> Result<[u8; 16], Malformed> {
        let hi = self.reader.i64()?.to_be_bytes();
        let lo = self.reader.i64()?.to_be_bytes();
        let mut out = [0u8; 16];
        for (slot, byte) in out.iter_mut().zip(hi.iter().chain(lo.iter())) {
            *slot = *byte;
        }
        Ok(out)
    }

    /// STRING / COMPACT_STRING.
    pub(crate) fn string(&mut self) -> Result<String, Malformed> {
        self.reader.any_string(self.flexible)
    }
    /// NULLABLE_STRING / COMPACT_NULLABLE_STRING.
    pub(crate) fn nullable_string(&mut self) -> Result<Option<String>, Malformed> {
        self.reader.any_nullable_string(self.flexible)
    }
    /// STRING / COMPACT_STRING, borrowed from the body.
    pub(crate) fn str(&mut self) -> Result<&'a str, Malformed> {
        self.reader.any_str(self.flexible)
    }
    /// NULLABLE_STRING / COMPACT_NULLABLE_STRING, borrowed from the body.
    pub(crate) fn nullable_str(&mut self) -> Result<Option<&'a str>, Malformed> {
        self.reader.any_nullable_str(self.flexible)
    }
    /// A STRING in a version that is not flexible even though the message later becomes so
    /// (helpers pick by `self.flexible`; this is for symmetry).
    pub(crate) fn skip_string(&mut self) -> Result<(), Malformed> {
        self.nullable_str().map(|_| ())
    }

    /// BYTES / COMPACT_BYTES / RECORDS, nullable.
    pub(crate) fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, Malformed> {
        let len = if self.flexible {
            match self.reader.uvarint()? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match usize::try_from(self.reader.i32()?) {
                Ok(n) => n,
                Err(_) => return Ok(None),
            }
        };
        let start = self.pos();
        self.reader.skip(len)?;
        self.body
            .get(start..self.pos())
            .map(Some)
            .ok_or(Malformed("bytes"))
    }

    /// An array length, `None` for a null array.
    pub(crate) fn array_len(&mut self) -> Result<Option<usize>, Malformed> {
        self.reader.any_array_len(self.flexible)
    }

    /// An array length where null is not allowed.
    pub(crate) fn array_len_required(&mut self) -> Result<usize, Malformed> {
        self.array_len()?.ok_or(Malformed("null array"))
    }

    /// An array of strings.
    pub(crate) fn strings(&mut self) -> Result<Option<Vec<String>>, Malformed> {
        let Some(n) = self.array_len()? else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(self.string()?);
        }
        Ok(Some(out))
    }

    /// An array of INT32, returned.
    pub(crate) fn i32s(&mut self) -> Result<Vec<i32>, Malformed> {
        let n = self.array_len()?.unwrap_or(0);
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(self.i32()?);
        }
        Ok(out)
    }

    /// Skips a tagged-field section when the version is flexible.
    pub(crate) fn tags(&mut self) -> Result<(), Malformed> {
        if self.flexible {
            self.reader.skip_tagged_fields()
        } else {
            Ok(())
        }
    }

    /// Ends a walk. Bytes after the last field are tolerated, as Kafka's own parser tolerates
    /// them (it stops after the last field it knows): librdkafka 2.16 sends a Metadata v13
    /// request for all topics with three bytes after its tagged fields, and Kafka answers it.
    /// Every field Kafka reads has been walked and checked by then, so nothing Kafka would act
    /// on goes unchecked; the bytes are forwarded untouched.
    pub(crate) fn finish(&self) -> Result<(), Malformed> {
        if self.reader.remaining() > 0 {
            tracing::debug!(
                trailing = self.reader.remaining(),
                "request body has bytes after its last field"
            );
        }
        Ok(())
    }
}

/// How many array elements of a request are recorded without allocating (a producer or
/// consumer names a handful of topics, each with a handful of partitions).
const INLINE: usize = 8;

/// Where an array sits in the body and where each element lies.
#[derive(Clone, Debug, Default)]
pub(crate) struct ArraySpan {
    /// The bytes of the length prefix.
    pub(crate) count: Range<usize>,
    /// Each element, in order.
    pub(crate) elements: SmallVec<[Range<usize>; INLINE]>,
    /// Compact (uvarint) length prefix.
    pub(crate) compact: bool,
}

impl ArraySpan {
    /// Starts recording an array whose length prefix begins at `start`.
    pub(crate) fn begin(walk: &Walk<'_>, start: usize) -> Self {
        Self {
            count: start..walk.pos(),
            elements: SmallVec::new(),
            compact: walk.flexible,
        }
    }

    /// The edits that keep only the elements for which `keep` is true.
    pub(crate) fn keep_only(&self, keep: &[bool], edits: &mut Vec<Edit>) {
        let kept = keep.iter().filter(|k| **k).count();
        let mut count = Vec::new();
        if self.compact {
            put_uvarint(&mut count, (kept as u32).saturating_add(1));
        } else {
            count.extend_from_slice(&(kept as i32).to_be_bytes());
        }
        edits.push(Edit {
            range: self.count.clone(),
            replacement: count,
        });
        for (element, keep) in self.elements.iter().zip(keep) {
            if !*keep {
                edits.push(Edit {
                    range: element.clone(),
                    replacement: Vec::new(),
                });
            }
        }
    }
}

/// Topics with their partitions, in request order.
pub(crate) type TopicPartitions = Vec<(String, Vec<i32>)>;

/// A name read from a request body, borrowed from it (request strings are checked UTF-8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Name<'a>(&'a str);

impl<'a> Name<'a> {
    /// The name, for as long as the body lives.
    pub(crate) fn as_str(&self) -> &'a str {
        self.0
    }
}

impl std::ops::Deref for Name<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

impl AsRef<str> for Name<'_> {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// One entry of a `[topic name, [partition…]]` array.
#[derive(Clone, Debug)]
pub(crate) struct TopicEntry<'a> {
    pub(crate) name: Name<'a>,
    pub(crate) partitions: SmallVec<[i32; INLINE]>,
}

/// The topics of a request and where each lies.
#[derive(Clone, Debug, Default)]
pub(crate) struct Topics<'a> {
    pub(crate) span: ArraySpan,
    pub(crate) entries: SmallVec<[TopicEntry<'a>; INLINE]>,
}

impl Topics<'_> {
    /// Every topic with its partitions, in request order (for a denial of the whole request).
    pub(crate) fn all(&self) -> TopicPartitions {
        self.denied(&vec![false; self.entries.len()])
    }

    /// The topics and partitions not kept, grouped by topic in request order.
    pub(crate) fn denied(&self, keep: &[bool]) -> Vec<(String, Vec<i32>)> {
        self.entries
            .iter()
            .zip(keep)
            .filter(|(_, k)| !**k)
            .map(|(e, _)| (e.name.to_string(), e.partitions.to_vec()))
            .collect()
    }
}

/// Reads `[name, [partition…], tags]` with `partition` reading one partition entry (its index
/// first) and returning the index.
pub(crate) fn topic_array<'a>(
    walk: &mut Walk<'a>,
    mut partition: impl FnMut(&mut Walk<'a>) -> Result<i32, Malformed>,
) -> Result<Topics<'a>, Malformed> {
    let start = walk.pos();
    let count = walk.array_len_required()?;
    let mut topics = Topics {
        span: ArraySpan::begin(walk, start),
        entries: SmallVec::new(),
    };
    for _ in 0..count {
        let at = walk.pos();
        let name = Name(walk.str()?);
        let n = walk.array_len_required()?;
        let mut partitions = SmallVec::new();
        for _ in 0..n {
            partitions.push(partition(walk)?);
        }
        walk.tags()?;
        topics.span.elements.push(at..walk.pos());
        topics.entries.push(TopicEntry { name, partitions });
    }
    Ok(topics)
}

/// Reads an array of strings, recording each element's span.
pub(crate) fn string_array(walk: &mut Walk<'_>) -> Result<(ArraySpan, Vec<String>), Malformed> {
    let start = walk.pos();
    let count = walk.array_len_required()?;
    let mut span = ArraySpan::begin(walk, start);
    let mut out = Vec::new();
    for _ in 0..count {
        let at = walk.pos();
        out.push(walk.string()?);
        span.elements.push(at..walk.pos());
    }
    Ok((span, out))
}

/// Replace `range` of the body with `replacement`.
#[derive(Clone, Debug)]
pub(crate) struct Edit {
    pub(crate) range: Range<usize>,
    pub(crate) replacement: Vec<u8>,
}

/// Rebuilds the frame: the header as sent, then the body with the edits applied (edits must not
/// overlap; they are applied in offset order).
pub(crate) fn rewrite(frame: &Bytes, header_len: usize, mut edits: Vec<Edit>) -> Bytes {
    edits.sort_by_key(|e| e.range.start);
    let body = frame.get(header_len..).unwrap_or_default();
    let mut out = BytesMut::with_capacity(frame.len());
    out.extend_from_slice(frame.get(..header_len).unwrap_or_default());
    let mut at = 0usize;
    for edit in edits {
        if edit.range.start < at {
            continue; // overlapping edits cannot be produced by our walkers; skip defensively
        }
        out.extend_from_slice(body.get(at..edit.range.start).unwrap_or_default());
        out.extend_from_slice(&edit.replacement);
        at = edit.range.end;
    }
    out.extend_from_slice(body.get(at..).unwrap_or_default());
    out.freeze()
}

/// The frame with `range` of the body replaced by `bytes`: for a replacement of the same length
/// (Fetch's session fields, on every fetch) one copy and no edit list.
pub(crate) fn overwrite(
    frame: &Bytes,
    header_len: usize,
    range: Range<usize>,
    bytes: &[u8],
) -> Bytes {
    let at = header_len.saturating_add(range.start);
    if range.len() == bytes.len() && at.saturating_add(bytes.len()) <= frame.len() {
        let mut out = BytesMut::from(frame.as_ref());
        if let Some(slot) = out.get_mut(at..at + bytes.len()) {
            slot.copy_from_slice(bytes);
            return out.freeze();
        }
    }
    let edit = Edit {
        range,
        replacement: bytes.to_vec(),
    };
    rewrite(frame, header_len, vec![edit])
}

pub(crate) fn put_uvarint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Whether `version` of `key` uses the flexible encoding (request side).
pub(crate) fn flexible(key: ApiKey, version: i16) -> bool {
    key.request_header_version(version) >= 2
}

/// Why an upstream response could not be rewritten.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The upstream response does not parse at the request's version.
    #[error("cannot decode the upstream {api:?} v{version} response")]
    Decode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
    },
    /// The rewritten response could not be encoded.
    #[error("cannot encode the {api:?} v{version} response")]
    Encode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
    },
}

/// Decodes an upstream response frame (header + body). The upstream is trusted (docs/security.md).
pub(crate) fn decode_response<T: Decodable>(
    api: ApiKey,
    version: i16,
    frame: &Bytes,
) -> Result<(ResponseHeader, T), PlanError> {
    let err = || PlanError::Decode { api, version };
    let mut buf = frame.clone();
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .map_err(|_| err())?;
    let body = T::decode(&mut buf, version).map_err(|_| err())?;
    Ok((header, body))
}

/// Encodes a response frame with the correlation id.
pub(crate) fn encode_response<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, PlanError> {
    crate::protocol::codec::encode_response(api, version, correlation_id, body)
        .map_err(|_| PlanError::Encode { api, version })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splices_array_elements_and_fixes_the_count() {
        // header "HH", body: i32 count 3, elements "a","bb","c", trailer 9
        let frame = Bytes::from_static(b"HH\x00\x00\x00\x03abbc\x09");
        let span = ArraySpan {
            count: 0..4,
            elements: smallvec::smallvec![4..5, 5..7, 7..8],
            compact: false,
        };
        let mut edits = Vec::new();
        span.keep_only(&[true, false, true], &mut edits);
        assert_eq!(&rewrite(&frame, 2, edits)[..], b"HH\x00\x00\x00\x02ac\x09");
        let frame = Bytes::from_static(b"H\x04abbc");
        let span = ArraySpan {
            count: 0..1,
            elements: smallvec::smallvec![1..2, 2..4, 4..5],
            compact: true,
        };
        let mut edits = Vec::new();
        span.keep_only(&[false, true, false], &mut edits);
        assert_eq!(&rewrite(&frame, 1, edits)[..], b"H\x02bb");
    }
}
