//! Signature verification, with `ring` (already in the tree through rustls).
//!
//! Why not jsonwebtoken's RustCrypto backend, which we first built on: it verifies every
//! algorithm we accept, but slowly. Measured on this 2-core machine, one RSA-2048 verification
//! cost ~95 µs with RustCrypto's `rsa` 0.10 against ~29 µs with ring, and P-256 ~315 µs against
//! ~62 µs (same run, same load). The goal is ≤ 20 µs per RS256 login with a cached key,
//! which RustCrypto cannot approach. ring covers every algorithm here with the JOSE encodings
//! (PKCS#1 v1.5 and PSS with a salt as long as the hash, RFC 7518 §3.3/§3.5; fixed-size `r||s`
//! ECDSA, §3.4; Ed25519, RFC 8037). jsonwebtoken stays as a dev-dependency: the tests sign
//! their vectors with it (RustCrypto), so every accepted token was made by another library.

use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey, VerificationAlgorithm};

use super::alg::Alg;

/// A public key, in the form ring verifies with.
#[derive(Clone)]
pub(crate) enum KeyMaterial {
    /// Modulus and exponent, big-endian, without leading zeros.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed SEC1 point (`04 || x || y`), P-256 or P-384.
    Ec { point: Vec<u8> },
    /// A 32-byte Ed25519 public key.
    Ed25519 { x: Vec<u8> },
}

/// Whether `signature` is `alg`'s signature of `message` under `key`. The caller has checked
/// that the key fits the algorithm; a mismatch just fails.
pub(crate) fn verify(alg: Alg, key: &KeyMaterial, message: &[u8], signature: &[u8]) -> bool {
    match key {
        KeyMaterial::Rsa { n, e } => {
            let params = match alg {
                Alg::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                Alg::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                Alg::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                Alg::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
                Alg::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
                Alg::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
                Alg::Es256 | Alg::Es384 | Alg::EdDsa => return false,
            };
            RsaPublicKeyComponents { n, e }
                .verify(params, message, signature)
                .is_ok()
        }
        KeyMaterial::Ec { point } => {
            let algorithm: &dyn VerificationAlgorithm = match alg {
                Alg::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
                Alg::Es384 => &signature::ECDSA_P384_SHA384_FIXED,
                _ => return false,
            };
            UnparsedPublicKey::new(algorithm, point)
                .verify(message, signature)
                .is_ok()
        }
        KeyMaterial::Ed25519 { x } => {
            alg == Alg::EdDsa
                && UnparsedPublicKey::new(&signature::ED25519, x)
                    .verify(message, signature)
                    .is_ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_another_kind_never_verifies() {
        let rsa = KeyMaterial::Rsa {
            n: vec![0xC5; 256],
            e: vec![1, 0, 1],
        };
        let ec = KeyMaterial::Ec { point: vec![4; 65] };
        let ed = KeyMaterial::Ed25519 { x: vec![1; 32] };
        for (alg, key) in [
            (Alg::Es256, &rsa),
            (Alg::EdDsa, &rsa),
            (Alg::Rs256, &ec),
            (Alg::EdDsa, &ec),
            (Alg::Rs256, &ed),
            (Alg::Es256, &ed),
        ] {
            assert!(!verify(alg, key, b"m", &[0; 64]), "{alg:?}");
        }
        // Garbage signatures of every length are just refusals.
        for len in [0, 1, 63, 64, 65, 256, 1024] {
            assert!(!verify(Alg::Rs256, &rsa, b"m", &vec![7; len]));
            assert!(!verify(Alg::Es256, &ec, b"m", &vec![7; len]));
            assert!(!verify(Alg::EdDsa, &ed, b"m", &vec![7; len]));
        }
    }
}
