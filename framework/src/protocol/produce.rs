//! The one field of a Produce request Portcullis must read: `acks`, because a Produce with
//! `acks = 0` gets no response and the response queue must not wait for one.

/// Whether the Produce request (body after the header) expects a response. Unparseable bodies
/// are treated as expecting one; the broker will answer or close.
pub fn expects_response(api_version: i16, body: &[u8]) -> bool {
    acks(api_version, body) != Some(0)
}

fn acks(api_version: i16, body: &[u8]) -> Option<i16> {
    // transactional_id comes first: a nullable string, compact (uvarint length + 1) from v9.
    let after_txn_id = if api_version >= 9 {
        let (len_plus_one, used) = uvarint(body)?;
        let len = (len_plus_one as usize).saturating_sub(1);
        used.checked_add(len)?
    } else {
        let len = i16::from_be_bytes([*body.first()?, *body.get(1)?]);
        2usize.checked_add(usize::try_from(len.max(0)).ok()?)?
    };
    let hi = *body.get(after_txn_id)?;
    let lo = *body.get(after_txn_id.checked_add(1)?)?;
    Some(i16::from_be_bytes([hi, lo]))
}

fn uvarint(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value: u32 = 0;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        value |= u32::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_acks_in_both_encodings() {
        // v3: null transactional id, acks 0.
        assert!(!expects_response(3, &[0xff, 0xff, 0, 0, 0, 0, 0x75, 0x30]));
        // v3: transactional id "t", acks -1.
        assert!(expects_response(3, &[0, 1, b't', 0xff, 0xff]));
        // v9: compact null (0), acks 0.
        assert!(!expects_response(9, &[0, 0, 0]));
        // v9: compact "ab" (3), acks 1.
        assert!(expects_response(9, &[3, b'a', b'b', 0, 1]));
        // Garbage expects a response.
        assert!(expects_response(9, &[0x80]));
        assert!(expects_response(3, &[]));
    }
}
