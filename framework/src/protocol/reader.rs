//! A bounds-checked reader for request bodies that Portcullis must decode itself.
//!
//! Every length on the wire is checked against the bytes that remain before anything is
//! allocated: an array of N elements needs at least N bytes, so a count above the remaining
//! length is refused outright. This is the rule Kafka's generated code follows since
//! CVE-2022-34917, and the one kafka-protocol 0.18 does not (it preallocates from the count).

/// A malformed body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed request body: {0}")]
pub struct Malformed(pub &'static str);

/// Reads Kafka's primitive types from a byte slice.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// Fails unless every byte was read. Request bodies use [`Reader::end_of_request`] instead.
    pub fn finish(&self) -> Result<(), Malformed> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(Malformed("trailing bytes"))
        }
    }

    /// Ends a request body. Kafka's parser stops after the last field it knows and ignores what
    /// follows (librdkafka 2.16 sends some requests with bytes after their tagged fields, and
    /// Kafka answers them), so the bytes are tolerated here too: every field Kafka reads has been
    /// read and checked by then.
    pub fn end_of_request(&self) {
        if self.remaining() > 0 {
            tracing::debug!(
                trailing = self.remaining(),
                "request body has bytes after its last field"
            );
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        let end = self.pos.checked_add(n).ok_or(Malformed(what))?;
        let slice = self.bytes.get(self.pos..end).ok_or(Malformed(what))?;
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Malformed> {
        let slice = self.take(N, what)?;
        <[u8; N]>::try_from(slice).map_err(|_| Malformed(what))
    }

    /// INT8.
    pub fn i8(&mut self) -> Result<i8, Malformed> {
        Ok(i8::from_be_bytes(self.array::<1>("int8")?))
    }
    /// INT16.
    pub fn i16(&mut self) -> Result<i16, Malformed> {
        Ok(i16::from_be_bytes(self.array::<2>("int16")?))
    }
    /// INT32.
    pub fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(i32::from_be_bytes(self.array::<4>("int32")?))
    }
    /// INT64.
    pub fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_be_bytes(self.array::<8>("int64")?))
    }
    /// BOOLEAN.
    pub fn bool(&mut self) -> Result<bool, Malformed> {
        Ok(self.i8()? != 0)
    }

    /// UNSIGNED_VARINT.
    pub fn uvarint(&mut self) -> Result<u32, Malformed> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            let [byte] = self.array::<1>("varint")?;
            value |= u32::from(byte & 0x7f)
                .checked_shl(shift)
                .ok_or(Malformed("varint"))?;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Malformed("varint too long"))
    }

    fn utf8(raw: &'a [u8]) -> Result<&'a str, Malformed> {
        std::str::from_utf8(raw).map_err(|_| Malformed("string is not UTF-8"))
    }

    /// STRING / NULLABLE_STRING (INT16 length), borrowed from the input.
    pub fn nullable_str(&mut self) -> Result<Option<&'a str>, Malformed> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let raw = self.take(len as usize, "string")?;
        Self::utf8(raw).map(Some)
    }

    /// STRING / NULLABLE_STRING (INT16 length).
    pub fn nullable_string(&mut self) -> Result<Option<String>, Malformed> {
        Ok(self.nullable_str()?.map(str::to_owned))
    }

    /// STRING.
    pub fn string(&mut self) -> Result<String, Malformed> {
        self.nullable_string()?.ok_or(Malformed("null string"))
    }

    /// COMPACT_NULLABLE_STRING (UNSIGNED_VARINT length + 1), borrowed from the input.
    pub fn compact_nullable_str(&mut self) -> Result<Option<&'a str>, Malformed> {
        match self.uvarint()? {
            0 => Ok(None),
            n => {
                let raw = self.take((n - 1) as usize, "compact string")?;
                Self::utf8(raw).map(Some)
            }
        }
    }

    /// COMPACT_NULLABLE_STRING (UNSIGNED_VARINT length + 1).
    pub fn compact_nullable_string(&mut self) -> Result<Option<String>, Malformed> {
        Ok(self.compact_nullable_str()?.map(str::to_owned))
    }

    /// COMPACT_STRING.
    pub fn compact_string(&mut self) -> Result<String, Malformed> {
        self.compact_nullable_string()?
            .ok_or(Malformed("null compact string"))
    }

    /// NULLABLE_STRING or COMPACT_NULLABLE_STRING by flexibility, borrowed from the input.
    pub fn any_nullable_str(&mut self, flexible: bool) -> Result<Option<&'a str>, Malformed> {
        if flexible {
            self.compact_nullable_str()
        } else {
            self.nullable_str()
        }
    }

    /// STRING or COMPACT_STRING by flexibility, borrowed from the input.
    pub fn any_str(&mut self, flexible: bool) -> Result<&'a str, Malformed> {
        if flexible {
            self.compact_nullable_str()?
                .ok_or(Malformed("null compact string"))
        } else {
            self.nullable_str()?.ok_or(Malformed("null string"))
        }
    }

    /// STRING or COMPACT_STRING by flexibility.
    pub fn any_string(&mut self, flexible: bool) -> Result<String, Malformed> {
        if flexible {
            self.compact_string()
        } else {
            self.string()
        }
    }

    /// NULLABLE_STRING or COMPACT_NULLABLE_STRING by flexibility.
    pub fn any_nullable_string(&mut self, flexible: bool) -> Result<Option<String>, Malformed> {
        if flexible {
            self.compact_nullable_string()
        } else {
            self.nullable_string()
        }
    }

    /// BYTES (INT32 length).
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.i32()?;
        let len = usize::try_from(len).map_err(|_| Malformed("negative bytes length"))?;
        self.take(len, "bytes")
    }

    /// COMPACT_BYTES.
    pub fn compact_bytes(&mut self) -> Result<&'a [u8], Malformed> {
        match self.uvarint()? {
            0 => Err(Malformed("null compact bytes")),
            n => self.take((n - 1) as usize, "compact bytes"),
        }
    }

    /// COMPACT_NULLABLE_BYTES.
    pub fn compact_nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, Malformed> {
        match self.uvarint()? {
            0 => Ok(None),
            n => self.take((n - 1) as usize, "compact bytes").map(Some),
        }
    }

    /// An array length (INT32, -1 for null), refused if it exceeds the remaining bytes.
    pub fn array_len(&mut self) -> Result<Option<usize>, Malformed> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(None);
        }
        self.bounded(len as usize).map(Some)
    }

    /// A compact array length (UNSIGNED_VARINT length + 1, 0 for null), bounded likewise.
    pub fn compact_array_len(&mut self) -> Result<Option<usize>, Malformed> {
        match self.uvarint()? {
            0 => Ok(None),
            n => self.bounded((n - 1) as usize).map(Some),
        }
    }

    /// An array length of either encoding.
    pub fn any_array_len(&mut self, flexible: bool) -> Result<Option<usize>, Malformed> {
        if flexible {
            self.compact_array_len()
        } else {
            self.array_len()
        }
    }

    fn bounded(&self, count: usize) -> Result<usize, Malformed> {
        if count > self.remaining() {
            Err(Malformed("array length exceeds the bytes present"))
        } else {
            Ok(count)
        }
    }

    /// Skips a tagged-field section (flexible versions).
    pub fn skip_tagged_fields(&mut self) -> Result<(), Malformed> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()?;
            self.take(size as usize, "tagged field")?;
        }
        Ok(())
    }

    /// The next `n` bytes, as they are.
    pub fn raw(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        self.take(n, "raw bytes")
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        self.take(n, "skip").map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_array_lengths_beyond_the_bytes_present() {
        assert!(Reader::new(&[0x7f, 0xff, 0xff, 0xff]).array_len().is_err());
        assert_eq!(Reader::new(&[0, 0, 0, 1, 9]).array_len(), Ok(Some(1)));
        assert_eq!(Reader::new(&[0xff, 0xff, 0xff, 0xff]).array_len(), Ok(None));
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0x0f])
            .compact_array_len()
            .is_err());
        assert_eq!(Reader::new(&[2, 0]).compact_array_len(), Ok(Some(1)));
    }

    #[test]
    fn strings_and_varints() {
        let mut r = Reader::new(&[0, 2, b'h', b'i', 3, b'y', b'o', 0, 0x80]);
        assert_eq!(r.string().unwrap(), "hi");
        assert_eq!(r.compact_string().unwrap(), "yo");
        assert_eq!(r.compact_nullable_string().unwrap(), None);
        assert!(r.uvarint().is_err());
        assert!(Reader::new(&[0, 5, b'a']).string().is_err());
        assert!(Reader::new(&[0x80, 0x80, 0x80, 0x80, 0x80, 0])
            .uvarint()
            .is_err());
    }
}
