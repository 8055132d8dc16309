//! [`ScramTokenCrypto`]: randomness and SCRAM key derivation for the framework's token manager.

use portcullis::credentials::{ScramCredential, ScramMechanism};
use portcullis::tokens::TokenCrypto;
use rand::RngCore;

use crate::keys::{derive_credential, random_salt};

/// A token's SCRAM credential is derived like any user's, from its password — the Base64 of
/// its HMAC — with a fresh random salt on every node (salts differ between nodes, which is
/// harmless: the salt travels in server-first), at Kafka's 4096 iterations.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScramTokenCrypto;

impl TokenCrypto for ScramTokenCrypto {
    fn random_id_bytes(&self) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        bytes
    }

    fn scram_credential(
        &self,
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> ScramCredential {
        derive_credential(mechanism, password, &random_salt(), iterations)
    }
}
