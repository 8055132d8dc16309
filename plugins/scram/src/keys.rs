//! SCRAM key derivation (RFC 5802 §3) for the two hash functions Kafka supports.
//!
//! Kafka derives keys from the UTF-8 bytes of the password with no SASLprep
//! (`ScramFormatter.normalize`), so this module does the same: a password that SASLprep would
//! change still produces the key a Kafka broker stores.

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use portcullis::credentials::{ScramCredential, ScramMechanism};
use rand::RngCore;
use sha2::{Digest, Sha256, Sha512};

/// Length of the salts [`random_salt`] produces, and of the fake salts unknown users are answered
/// with, so that the two cannot be told apart by length.
pub const SALT_LEN: usize = 32;

/// `HMAC(key, parts[0] || parts[1] || ...)` with the mechanism's hash.
pub(crate) fn hmac(mechanism: ScramMechanism, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => mac_with::<Hmac<Sha256>>(key, parts),
        ScramMechanism::Sha512 => mac_with::<Hmac<Sha512>>(key, parts),
    }
}

/// `H(data)` with the mechanism's hash.
pub(crate) fn hash(mechanism: ScramMechanism, data: &[u8]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
        ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
    }
}

/// HMAC-SHA-256 under a process-local key, used where the output only has to be unpredictable
/// (fake salts, cache keys) and not tied to a mechanism.
pub fn keyed_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mac = mac_with::<Hmac<Sha256>>(key, parts);
    // Both are 32 bytes long; zip keeps this free of slice indexing.
    for (o, m) in out.iter_mut().zip(mac) {
        *o = m;
    }
    out
}

fn mac_with<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC accepts keys of every length (RFC 2104 hashes long keys and pads short ones), so
    // `new_from_slice` cannot fail for `Hmac<_>`; the error type exists only for fixed-key MACs.
    #[allow(clippy::expect_used)]
    let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// `SaltedPassword = Hi(password, salt, i)`, i.e. PBKDF2 with HMAC-H and an output of one digest.
pub fn salted_password(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let mut out = vec![0u8; mechanism.digest_len()];
    match mechanism {
        ScramMechanism::Sha256 => {
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
        }
        ScramMechanism::Sha512 => {
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
        }
    }
    out
}

/// `ClientKey = HMAC(SaltedPassword, "Client Key")`.
pub(crate) fn client_key(mechanism: ScramMechanism, salted: &[u8]) -> Vec<u8> {
    hmac(mechanism, salted, &[b"Client Key"])
}

/// `ServerKey = HMAC(SaltedPassword, "Server Key")`.
pub(crate) fn server_key(mechanism: ScramMechanism, salted: &[u8]) -> Vec<u8> {
    hmac(mechanism, salted, &[b"Server Key"])
}

/// Byte-wise XOR of two equally long strings (callers check the lengths first).
pub(crate) fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// Derives the stored credential for `password` (PBKDF2, then ClientKey → StoredKey and
/// ServerKey). The password is used as its UTF-8 bytes, with no SASLprep, like Kafka.
pub fn derive_credential(
    mechanism: ScramMechanism,
    password: &str,
    salt: &[u8],
    iterations: u32,
) -> ScramCredential {
    let salted = salted_password(mechanism, password.as_bytes(), salt, iterations);
    credential_from_salted_password(mechanism, &salted, salt, iterations)
}

/// Builds the stored credential from an already salted password: KIP-554's
/// AlterUserScramCredentials carries `SaltedPassword`, never the password.
pub fn credential_from_salted_password(
    mechanism: ScramMechanism,
    salted: &[u8],
    salt: &[u8],
    iterations: u32,
) -> ScramCredential {
    let client_key = client_key(mechanism, salted);
    ScramCredential {
        salt: salt.to_vec(),
        stored_key: hash(mechanism, &client_key),
        server_key: server_key(mechanism, salted),
        iterations,
    }
}

/// A fresh random salt of [`SALT_LEN`] bytes from the operating system's generator.
pub fn random_salt() -> Vec<u8> {
    let mut salt = vec![0u8; SALT_LEN];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    salt
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;

    /// RFC 7677 §3: user "user", password "pencil", salt and iteration count from the example.
    #[test]
    fn rfc7677_keys() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = derive_credential(ScramMechanism::Sha256, "pencil", &salt, 4096);
        // ServerSignature in the example is HMAC(ServerKey, AuthMessage); checked end to end in
        // the server tests. Here: the derived keys have digest length and are deterministic.
        assert_eq!(cred.stored_key.len(), 32);
        assert_eq!(cred.server_key.len(), 32);
        assert_eq!(
            cred,
            derive_credential(ScramMechanism::Sha256, "pencil", &salt, 4096)
        );
        assert_ne!(
            cred,
            derive_credential(ScramMechanism::Sha256, "pencil2", &salt, 4096)
        );
    }

    /// PBKDF2-HMAC-SHA256 test vector (RFC 7914 §11: P="passwd", S="salt", c=1, first 32 bytes).
    #[test]
    fn pbkdf2_sha256_vector() {
        let out = salted_password(ScramMechanism::Sha256, b"passwd", b"salt", 1);
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
        );
    }

    #[test]
    fn salted_password_path_matches_password_path() {
        let salt = random_salt();
        assert_eq!(salt.len(), SALT_LEN);
        let salted = salted_password(ScramMechanism::Sha512, "sekret".as_bytes(), &salt, 4096);
        assert_eq!(
            credential_from_salted_password(ScramMechanism::Sha512, &salted, &salt, 4096),
            derive_credential(ScramMechanism::Sha512, "sekret", &salt, 4096)
        );
    }
}
