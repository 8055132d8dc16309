//! The primitives of every encoding: [`Writer`] builds a buffer, [`Reader`] takes one apart
//! without trusting a length, and [`CodecError`] says why decoding failed.

/// Why bytes from the other side could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A length prefix or the bytes it announces run past the end.
    #[error("the encoded value is truncated")]
    Truncated,
    /// A string is not UTF-8.
    #[error("an encoded string is not UTF-8")]
    NotUtf8,
    /// A kind code this side does not know.
    #[error("unknown code {0}")]
    UnknownCode(u32),
}

/// Builds an encoded buffer.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }
    /// The bytes.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
    /// A `u8`.
    pub fn u8(&mut self, value: u8) -> &mut Self {
        self.0.push(value);
        self
    }
    /// A `u32`.
    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// A `u64`.
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// An `i64`.
    pub fn i64(&mut self, value: i64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// A length-prefixed byte string (cut at 4 GiB rather than wrapping the prefix).
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
        self.u32(len);
        self.0
            .extend_from_slice(value.get(..len as usize).unwrap_or_default());
        self
    }
    /// A length-prefixed string.
    pub fn str(&mut self, value: &str) -> &mut Self {
        self.bytes(value.as_bytes())
    }
    /// An optional string: a presence byte, then the string.
    pub fn opt_str(&mut self, value: Option<&str>) -> &mut Self {
        match value {
            Some(value) => self.u8(1).str(value),
            None => self.u8(0),
        }
    }
    /// An optional `i64`.
    pub fn opt_i64(&mut self, value: Option<i64>) -> &mut Self {
        match value {
            Some(value) => self.u8(1).i64(value),
            None => self.u8(0),
        }
    }
    /// A count (lists).
    pub fn count(&mut self, count: usize) -> &mut Self {
        self.u32(u32::try_from(count).unwrap_or(u32::MAX))
    }
}

/// Reads an encoded buffer.
#[derive(Debug)]
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// Reads `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }
    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn take<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(CodecError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
    /// A `u8`.
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take::<1>()?[0])
    }
    /// A `u32`.
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    /// An `i64`.
    pub fn i64(&mut self) -> Result<i64, CodecError> {
        self.take::<8>().map(i64::from_le_bytes)
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let len = usize::try_from(self.u32()?).map_err(|_| CodecError::Truncated)?;
        let (value, rest) = self.0.split_at_checked(len).ok_or(CodecError::Truncated)?;
        self.0 = rest;
        Ok(value)
    }
    /// A length-prefixed string.
    pub fn str(&mut self) -> Result<&'a str, CodecError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| CodecError::NotUtf8)
    }
    /// An owned string.
    pub fn string(&mut self) -> Result<String, CodecError> {
        self.str().map(str::to_owned)
    }
    /// An optional string.
    pub fn opt_string(&mut self) -> Result<Option<String>, CodecError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.string().map(Some),
        }
    }
    /// An optional `i64`.
    pub fn opt_i64(&mut self) -> Result<Option<i64>, CodecError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.i64().map(Some),
        }
    }
    /// A count, bounded by what the rest of the buffer could hold (each element takes at least
    /// `min_size` bytes), so a forged count cannot make the reader reserve memory.
    pub fn count(&mut self, min_size: usize) -> Result<usize, CodecError> {
        let count = usize::try_from(self.u32()?).map_err(|_| CodecError::Truncated)?;
        if count.saturating_mul(min_size.max(1)) > self.0.len() {
            return Err(CodecError::Truncated);
        }
        Ok(count)
    }
}
