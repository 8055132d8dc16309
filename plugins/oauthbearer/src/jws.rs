//! The JWS compact serialization (RFC 7515 §7.1): `header.payload.signature`, each part
//! base64url, header and payload JSON objects. Only the splitting and decoding live here; what a
//! header or a claim must say is the validators' business.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use serde_json::{Map, Value};

use crate::json::parse_object;
use crate::validator::Refusal;
use crate::MAX_TOKEN_LEN;

/// base64url, with or without padding (RFC 7515 says without; some issuers pad).
pub(crate) const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Nesting allowed in a JOSE header (flat in practice: `crit` is the only list).
const HEADER_DEPTH: usize = 4;
/// Nesting allowed in a claim set (objects such as Keycloak's `realm_access` nest a little).
const CLAIMS_DEPTH: usize = 16;

/// A token split in its three parts, nothing decoded yet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compact<'a> {
    /// `header.payload`, the bytes the signature covers.
    pub signing_input: &'a str,
    pub header: &'a str,
    pub payload: &'a str,
    pub signature: &'a str,
}

/// Splits a token in three non-empty-header, non-empty-payload parts; the signature may be empty
/// (the unsecured validator wants it so, the others refuse it).
pub(crate) fn split(token: &str) -> Result<Compact<'_>, Refusal> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(Refusal::invalid_token(format!(
            "token of {} bytes is over the {MAX_TOKEN_LEN}-byte limit",
            token.len()
        )));
    }
    let not_jws =
        || Refusal::invalid_token("not a JWS compact serialization (header.payload.signature)");
    let (signing_input, signature) = token.rsplit_once('.').ok_or_else(not_jws)?;
    let (header, payload) = signing_input.split_once('.').ok_or_else(not_jws)?;
    // A fourth dot (a JWE has five parts) lands in the payload.
    if header.is_empty() || payload.is_empty() || payload.contains('.') {
        return Err(not_jws());
    }
    Ok(Compact {
        signing_input,
        header,
        payload,
        signature,
    })
}

/// Decodes the header part into a JSON object.
pub(crate) fn decode_header(part: &str) -> Result<Map<String, Value>, Refusal> {
    decode_object(part, HEADER_DEPTH, "header")
}

/// Decodes the payload part into a JSON object (the claim set).
pub(crate) fn decode_claims(part: &str) -> Result<Map<String, Value>, Refusal> {
    decode_object(part, CLAIMS_DEPTH, "payload")
}

fn decode_object(part: &str, depth: usize, what: &str) -> Result<Map<String, Value>, Refusal> {
    let bytes = BASE64URL
        .decode(part)
        .map_err(|_| Refusal::invalid_token(format!("the {what} is not base64url")))?;
    parse_object(&bytes, depth)
        .map_err(|e| Refusal::invalid_token(format!("the {what} is not a JSON object: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits() {
        let c = split("aGVhZA.cGF5.c2ln").unwrap();
        assert_eq!(
            (c.header, c.payload, c.signature),
            ("aGVhZA", "cGF5", "c2ln")
        );
        assert_eq!(c.signing_input, "aGVhZA.cGF5");
        assert_eq!(split("a.b.").unwrap().signature, "");
        for bad in ["", "abc", "a.b", ".b.c", "a..c", "a.b.c.d", "a.b.c.d.e"] {
            assert!(split(bad).is_err(), "{bad}");
        }
        assert!(split(&"a".repeat(MAX_TOKEN_LEN + 1)).is_err());
    }

    #[test]
    fn decodes_with_or_without_padding() {
        assert!(decode_header("eyJhbGciOiJub25lIn0").is_ok());
        assert!(decode_header("eyJhbGciOiJub25lIn0=").is_ok());
        assert!(decode_header("eyJhbGciOiJub25lIn0+").is_err());
        assert!(decode_header("bm90IGpzb24").is_err());
    }
}
