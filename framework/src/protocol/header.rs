//! Request headers, parsed without trusting a single byte.

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;

/// A parsed request header and where the body starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id, echoed in the response.
    pub correlation_id: i32,
    /// The client id, if sent: a view of the frame's bytes when they are UTF-8 (every real
    /// client), so parsing a header allocates nothing.
    pub client_id: Option<StrBytes>,
    /// The number of header bytes: the body starts here.
    pub header_len: usize,
}

/// Why a header could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer bytes than the fixed part of a header.
    #[error("request frame of {0} bytes is too short for a header")]
    TooShort(usize),
    /// An API key this build does not know.
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    /// A version this build cannot parse the header for.
    #[error("API {api_key} version {api_version} is not supported")]
    UnsupportedVersion {
        /// The key.
        api_key: i16,
        /// The version.
        api_version: i16,
    },
    /// The client id or the tagged fields run past the frame.
    #[error("malformed request header")]
    Malformed,
}

/// Peeks the API key, version and correlation id: enough to answer or refuse a request without
/// parsing anything else.
pub fn peek_ids(frame: &[u8]) -> Result<(i16, i16, i32), HeaderError> {
    match frame {
        [k0, k1, v0, v1, c0, c1, c2, c3, ..] => Ok((
            i16::from_be_bytes([*k0, *k1]),
            i16::from_be_bytes([*v0, *v1]),
            i32::from_be_bytes([*c0, *c1, *c2, *c3]),
        )),
        _ => Err(HeaderError::TooShort(frame.len())),
    }
}

/// Parses the full request header (v1, or v2 with tagged fields for flexible versions).
pub fn parse(frame: &Bytes) -> Result<RequestHeader, HeaderError> {
    let (api_key, api_version, correlation_id) = peek_ids(frame)?;
    let key = ApiKey::try_from(api_key).map_err(|_| HeaderError::UnknownApiKey(api_key))?;
    let range = key.valid_versions();
    if api_version < range.min || api_version > range.max {
        return Err(HeaderError::UnsupportedVersion {
            api_key,
            api_version,
        });
    }
    let mut reader = Reader {
        bytes: frame,
        pos: 8,
    };
    let client_id = reader.nullable_string_range()?.map(|range| {
        let raw = frame.slice(range);
        // Kafka reads the client id leniently; so do we, but never as raw bytes in logs.
        StrBytes::from_utf8(raw.clone())
            .unwrap_or_else(|_| StrBytes::from_string(String::from_utf8_lossy(&raw).into_owned()))
    });
    if key.request_header_version(api_version) >= 2 {
        reader.skip_tagged_fields()?;
    }
    Ok(RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id,
        header_len: reader.pos,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], HeaderError> {
        let end = self.pos.checked_add(n).ok_or(HeaderError::Malformed)?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or(HeaderError::Malformed)?;
        self.pos = end;
        Ok(slice)
    }

    /// Where a nullable string's bytes are in the frame.
    fn nullable_string_range(&mut self) -> Result<Option<std::ops::Range<usize>>, HeaderError> {
        let len = match self.take(2)? {
            [a, b] => i16::from_be_bytes([*a, *b]),
            _ => return Err(HeaderError::Malformed),
        };
        if len < 0 {
            return Ok(None);
        }
        let start = self.pos;
        self.take(len as usize)?;
        Ok(Some(start..self.pos))
    }

    fn uvarint(&mut self) -> Result<u32, HeaderError> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            let byte = *self.take(1)?.first().ok_or(HeaderError::Malformed)?;
            value |= u32::from(byte & 0x7f)
                .checked_shl(shift)
                .ok_or(HeaderError::Malformed)?;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(HeaderError::Malformed)
    }

    fn skip_tagged_fields(&mut self) -> Result<(), HeaderError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()?;
            self.take(size as usize)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(bytes: &[u8]) -> Bytes {
        Bytes::copy_from_slice(bytes)
    }

    #[test]
    fn parses_v1_header() {
        // Metadata v1, correlation 7, client id "ab", then a body.
        let f = frame(&[0, 3, 0, 1, 0, 0, 0, 7, 0, 2, b'a', b'b', 0xff]);
        let h = parse(&f).unwrap();
        assert_eq!((h.api_key, h.api_version, h.correlation_id), (3, 1, 7));
        assert_eq!(h.client_id.as_deref(), Some("ab"));
        assert_eq!(h.header_len, 12);
    }

    #[test]
    fn parses_flexible_header_with_tags() {
        // SaslAuthenticate v2: client id null, one tagged field of 2 bytes.
        let f = frame(&[0, 36, 0, 2, 0, 0, 0, 1, 0xff, 0xff, 1, 5, 2, 9, 9, 0xaa]);
        let h = parse(&f).unwrap();
        assert_eq!(h.client_id, None);
        assert_eq!(h.header_len, 15);
    }

    #[test]
    fn refuses_short_and_malformed_frames() {
        assert_eq!(parse(&frame(&[0, 3])), Err(HeaderError::TooShort(2)));
        assert_eq!(
            parse(&frame(&[0, 3, 0, 1, 0, 0, 0, 7, 0, 9, b'a'])),
            Err(HeaderError::Malformed)
        );
        assert_eq!(
            parse(&frame(&[0x7f, 0x7f, 0, 1, 0, 0, 0, 7, 0, 0])),
            Err(HeaderError::UnknownApiKey(0x7f7f))
        );
        // Tagged field size running past the end.
        assert_eq!(
            parse(&frame(&[0, 36, 0, 2, 0, 0, 0, 1, 0xff, 0xff, 1, 5, 0x7f])),
            Err(HeaderError::Malformed)
        );
        // A varint that never ends.
        assert_eq!(
            parse(&frame(&[
                0, 36, 0, 2, 0, 0, 0, 1, 0xff, 0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80
            ])),
            Err(HeaderError::Malformed)
        );
    }
}
