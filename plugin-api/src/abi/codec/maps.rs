//! String maps (SASL extensions, token claims) and byte lists (certificate chains).

use std::collections::BTreeMap;

use super::wire::{CodecError, Reader, Writer};

/// Encodes a string map (SASL extensions): for each entry, key then value.
pub fn encode_string_map(map: &BTreeMap<String, String>) -> Vec<u8> {
    let mut w = Writer::new();
    for (key, value) in map {
        w.str(key).str(value);
    }
    w.finish()
}

/// Decodes [`encode_string_map`].
///
/// # Errors
/// Truncated input or non-UTF-8 strings.
pub fn decode_string_map(bytes: &[u8]) -> Result<BTreeMap<String, String>, CodecError> {
    let mut r = Reader::new(bytes);
    let mut map = BTreeMap::new();
    while !r.is_empty() {
        let key = r.string()?;
        let value = r.string()?;
        map.insert(key, value);
    }
    Ok(map)
}

/// Encodes a list of byte strings (a certificate chain).
pub fn encode_byte_list(list: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Writer::new();
    for item in list {
        w.bytes(item);
    }
    w.finish()
}

/// Decodes [`encode_byte_list`].
///
/// # Errors
/// Truncated input.
pub fn decode_byte_list(bytes: &[u8]) -> Result<Vec<Vec<u8>>, CodecError> {
    let mut r = Reader::new(bytes);
    let mut list = Vec::new();
    while !r.is_empty() {
        list.push(r.bytes()?.to_vec());
    }
    Ok(list)
}
