//! Nonces and the per-process secret behind fake salts.

use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use portcullis::credentials::ScramMechanism;
use rand::RngCore;

use crate::keys::{keyed_sha256, SALT_LEN};

/// Random bytes per nonce: 192 bits, rendered as 32 base64 characters (all printable, never `,`).
const NONCE_BYTES: usize = 24;

/// Where nonces come from. Production code always draws them at random; tests inject the nonces
/// of published test vectors.
#[derive(Clone, Debug, Default)]
pub(crate) enum NonceSource {
    /// A fresh random nonce every time.
    #[default]
    Random,
    /// Always this nonce (test vectors only).
    #[cfg(test)]
    Fixed(String),
}

impl NonceSource {
    /// The next nonce.
    pub(crate) fn next(&self) -> String {
        match self {
            NonceSource::Random => {
                let mut bytes = [0u8; NONCE_BYTES];
                rand::rngs::OsRng.fill_bytes(&mut bytes);
                B64.encode(bytes)
            }
            #[cfg(test)]
            NonceSource::Fixed(nonce) => nonce.clone(),
        }
    }
}

/// The secret fake salts are derived from. It lives as long as the process, so that an unknown
/// user is answered with the same salt on every attempt (a salt that changed between attempts
/// would tell the user does not exist), and it is random, so that fake salts cannot be computed
/// offline and compared.
fn fake_salt_secret() -> &'static [u8; 32] {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut secret = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut secret);
        secret
    })
}

/// The salt an unknown user (or token id) is answered with:
/// `HMAC-SHA256(process secret, mechanism || name)`, as long as a real salt.
pub(crate) fn fake_salt(mechanism: ScramMechanism, name: &str) -> Vec<u8> {
    let mac = keyed_sha256(
        fake_salt_secret(),
        &[
            mechanism.mechanism_name().as_bytes(),
            b"\0",
            name.as_bytes(),
        ],
    );
    mac.iter().copied().cycle().take(SALT_LEN).collect()
}

/// Random bytes that stand in for the keys of a credential that does not exist.
pub(crate) fn random_bytes(len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_printable_and_distinct() {
        let a = NonceSource::Random.next();
        let b = NonceSource::Random.next();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| (0x21..=0x7E).contains(&b) && b != b','));
    }

    #[test]
    fn fake_salt_is_stable_per_name_and_mechanism() {
        let s = fake_salt(ScramMechanism::Sha256, "mallory");
        assert_eq!(s.len(), SALT_LEN);
        assert_eq!(s, fake_salt(ScramMechanism::Sha256, "mallory"));
        assert_ne!(s, fake_salt(ScramMechanism::Sha512, "mallory"));
        assert_ne!(s, fake_salt(ScramMechanism::Sha256, "mallory2"));
    }
}
