//! The byte encoding of [`crate::sasl::Authenticated::extensions`] in an
//! [`super::AbiStepResult`]: for each entry, `u32` little-endian key length, key bytes, `u32`
//! little-endian value length, value bytes. Length-prefixed rather than separator-based so that
//! any key or value survives.

use std::collections::BTreeMap;

/// Why extension bytes from a plugin could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExtensionsError {
    /// A length prefix or the bytes it announces run past the end.
    #[error("extensions are truncated")]
    Truncated,
    /// A key or value is not UTF-8.
    #[error("an extension key or value is not UTF-8")]
    NotUtf8,
}

/// Encodes extensions for the host.
pub(crate) fn encode(extensions: &BTreeMap<String, String>) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in extensions {
        for part in [key, value] {
            // A key or value over 4 GiB cannot be sent; it is cut rather than wrapping the prefix.
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(part.as_bytes().get(..len as usize).unwrap_or_default());
        }
    }
    out
}

/// Decodes extensions from a plugin.
pub(crate) fn decode(mut bytes: &[u8]) -> Result<BTreeMap<String, String>, ExtensionsError> {
    let mut out = BTreeMap::new();
    while !bytes.is_empty() {
        let key = take_string(&mut bytes)?;
        let value = take_string(&mut bytes)?;
        out.insert(key, value);
    }
    Ok(out)
}

fn take_string(bytes: &mut &[u8]) -> Result<String, ExtensionsError> {
    let (prefix, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(ExtensionsError::Truncated)?;
    let len =
        usize::try_from(u32::from_le_bytes(*prefix)).map_err(|_| ExtensionsError::Truncated)?;
    let (text, rest) = rest
        .split_at_checked(len)
        .ok_or(ExtensionsError::Truncated)?;
    *bytes = rest;
    String::from_utf8(text.to_vec()).map_err(|_| ExtensionsError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut extensions = BTreeMap::new();
        extensions.insert("tokenauth".to_owned(), "true".to_owned());
        extensions.insert("a,b=c\0".to_owned(), String::new());
        assert_eq!(decode(&encode(&extensions)), Ok(extensions));
        assert_eq!(decode(&[]), Ok(BTreeMap::new()));
    }

    #[test]
    fn rejects_truncated_and_non_utf8() {
        assert_eq!(decode(&[1, 0, 0]), Err(ExtensionsError::Truncated));
        assert_eq!(decode(&[5, 0, 0, 0, b'a']), Err(ExtensionsError::Truncated));
        assert_eq!(
            decode(&[1, 0, 0, 0, b'k']),
            Err(ExtensionsError::Truncated),
            "a key without a value"
        );
        assert_eq!(
            decode(&[1, 0, 0, 0, 0xff, 0, 0, 0, 0]),
            Err(ExtensionsError::NotUtf8)
        );
    }
}
