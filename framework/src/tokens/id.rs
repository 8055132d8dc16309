//! Token ids as Kafka makes them, and the HMAC that is a token's password.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha512;

use crate::secret::{constant_time_eq, Secret};

/// The length of a token id: 16 bytes in unpadded URL-safe Base64.
pub const TOKEN_ID_LEN: usize = 22;
/// The length of a token's HMAC-SHA512.
pub const HMAC_LEN: usize = 64;

/// A token id from 16 random bytes, as Kafka's `Uuid.randomUuid().toString()` makes it: the
/// bytes of a version-4 UUID (`java.util.UUID.randomUUID`), URL-safe Base64 without padding.
/// `None` for the values Kafka rejects and draws again: ids that start with `-` (command-line
/// tools would read them as options) and its reserved ids (all zeros; `…01`, the metadata topic
/// id), which a version-4 UUID can never be anyway.
pub fn token_id_from(random: [u8; 16]) -> Option<String> {
    let mut bytes = random;
    // RFC 4122 version 4 and variant bits, as java.util.UUID.randomUUID sets them.
    if let Some(b) = bytes.get_mut(6) {
        *b = (*b & 0x0f) | 0x40;
    }
    if let Some(b) = bytes.get_mut(8) {
        *b = (*b & 0x3f) | 0x80;
    }
    let id = URL_SAFE_NO_PAD.encode(bytes);
    (!id.starts_with('-')).then_some(id)
}

/// Whether `name` has the shape of a token id this server makes (see [`token_id_from`]): 22
/// URL-safe Base64 characters that decode to a version-4 UUID and do not start with `-`. Used to
/// keep SCRAM user names and token ids apart when tokens are accepted without the `tokenauth`
/// extension.
pub fn has_token_id_shape(name: &str) -> bool {
    if name.len() != TOKEN_ID_LEN || name.starts_with('-') {
        return false;
    }
    let Ok(bytes) = URL_SAFE_NO_PAD.decode(name) else {
        return false;
    };
    // Canonical encodings only: the last character of 16 bytes carries 2 unused bits.
    if URL_SAFE_NO_PAD.encode(&bytes) != name {
        return false;
    }
    matches!(
        (bytes.get(6), bytes.get(8)),
        (Some(v), Some(r)) if v >> 4 == 4 && r >> 6 == 0b10
    )
}

/// HMAC-SHA512 of token ids under the shared secret (Kafka: `HmacSHA512`, key = the UTF-8 bytes of
/// `delegation.token.secret.key`, message = the UTF-8 bytes of the id). The key schedule is
/// computed once; each HMAC starts from a copy of it.
#[derive(Clone)]
pub struct TokenHmac {
    keyed: Hmac<Sha512>,
}

impl TokenHmac {
    /// The HMAC under `secret`.
    pub fn new(secret: &Secret) -> Self {
        // HMAC accepts keys of every length (RFC 2104 hashes long keys and pads short ones), so
        // `new_from_slice` cannot fail for `Hmac<_>`; the error exists only for fixed-key MACs.
        #[allow(clippy::expect_used)]
        let keyed = <Hmac<Sha512> as Mac>::new_from_slice(secret.expose().as_bytes())
            .expect("HMAC accepts keys of any length");
        Self { keyed }
    }

    /// The token's HMAC.
    pub fn of(&self, token_id: &str) -> [u8; HMAC_LEN] {
        let mut mac = self.keyed.clone();
        mac.update(token_id.as_bytes());
        let mut out = [0u8; HMAC_LEN];
        for (o, b) in out.iter_mut().zip(mac.finalize().into_bytes()) {
            *o = b;
        }
        out
    }

    /// Whether `hmac` is the token's HMAC, in constant time.
    pub fn verify(&self, token_id: &str, hmac: &[u8]) -> bool {
        constant_time_eq(&self.of(token_id), hmac)
    }
}

impl std::fmt::Debug for TokenHmac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenHmac(<keyed>)")
    }
}

/// The token's SCRAM password: standard Base64 (with padding) of its HMAC, 88 characters.
pub fn password(hmac: &[u8]) -> String {
    STANDARD.encode(hmac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_look_like_kafkas() {
        for seed in 0..=255u8 {
            let Some(id) = token_id_from([seed; 16]) else {
                continue;
            };
            assert_eq!(id.len(), TOKEN_ID_LEN);
            assert!(has_token_id_shape(&id), "{id}");
            assert!(!id.contains('=') && !id.contains('+') && !id.contains('/'));
        }
        // A leading '-' is drawn again.
        assert_eq!(token_id_from([0xf8; 16]), None);
    }

    #[test]
    fn the_shape_check_refuses_ordinary_names() {
        for name in [
            "alice",
            "",
            "AAAAAAAAAAAAAAAAAAAAAA",  // not a version-4 UUID
            "-AAAAAAAAQAAAAAAAAAAAA",  // leading dash
            "aaaaaaaaaaaaaaaaaaaaaaa", // 23 characters
            "aaaaaaaaaaaaaaaaaaaaa!",
        ] {
            assert!(!has_token_id_shape(name), "{name}");
        }
    }

    /// RFC 4231 test case 2 for HMAC-SHA-512 (key "Jefe").
    #[test]
    fn hmac_is_hmac_sha512_of_the_id_under_the_secret() {
        let hmac = TokenHmac::new(&Secret::new("Jefe"));
        let out = hmac.of("what do ya want for nothing?");
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
        assert!(hmac.verify("what do ya want for nothing?", &out));
        assert!(!hmac.verify("what do ya want for nothing!", &out));
        assert_eq!(password(&out).len(), 88);
    }
}
