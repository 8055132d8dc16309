//! Checks a PLAIN password against a stored SCRAM credential, with a bounded memo of PBKDF2.
//!
//! Checking a password means deriving `StoredKey = H(HMAC(PBKDF2(password, salt, i), "Client
//! Key"))` and comparing it with the stored one: thousands of hash rounds per login (Redpanda
//! reported ~45% of its CPU going to this). The derivation is deterministic, so its result can be
//! remembered:
//!
//! - key: `HMAC-SHA256(process-random key, user, mechanism, salt, iterations, password)`, each
//!   field length-prefixed. The password is never stored, and the key is useless outside this
//!   process;
//! - value: the StoredKey the derivation produced.
//!
//! A hit is compared with the *current* credential's StoredKey, in constant time. A changed
//! credential therefore invalidates old entries by itself: a new salt or iteration count changes
//! the key, and a new password under the same salt no longer matches the remembered StoredKey.
//! Only successful verifications are remembered, so failed guesses cannot push real entries out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use portcullis::credentials::{CredentialView, ScramCredential, ScramMechanism};
use portcullis::secret::constant_time_eq;
use portcullis_plugin_scram::{derive_credential, keyed_sha256, SALT_LEN};
use rand::RngCore;

use crate::cache::BoundedCache;

/// Entries the derivation cache holds by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 10_000;

/// Which SCRAM credential a PLAIN password is checked against, in order of preference.
const MECHANISM_PREFERENCE: [ScramMechanism; 2] = [ScramMechanism::Sha512, ScramMechanism::Sha256];

/// Verifies passwords against SCRAM credentials and remembers successful derivations.
pub struct PasswordVerifier {
    cache_key: [u8; 32],
    cache: BoundedCache<[u8; 32], Vec<u8>>,
    derivations: AtomicU64,
}

impl PasswordVerifier {
    /// A verifier whose cache holds at most `capacity` entries (0 disables it).
    pub fn new(capacity: usize) -> Self {
        let mut cache_key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut cache_key);
        Self {
            cache_key,
            cache: BoundedCache::new(capacity),
            derivations: AtomicU64::new(0),
        }
    }

    /// Whether `password` is the password of `user`. Users without a usable credential cost the
    /// same PBKDF2 as users with one, so the time taken does not tell whether a user exists.
    pub fn verify(&self, credentials: &dyn CredentialView, user: &str, password: &str) -> bool {
        self.verify_with(credentials, user, password).is_some()
    }

    /// Like [`verify`](Self::verify), and says which of the user's SCRAM credentials verified
    /// the password (the session depends on that one: removing or changing it revokes the
    /// session).
    pub fn verify_with(
        &self,
        credentials: &dyn CredentialView,
        user: &str,
        password: &str,
    ) -> Option<ScramMechanism> {
        let found = MECHANISM_PREFERENCE
            .into_iter()
            .find_map(|m| credentials.scram(user, m).map(|c| (m, c)));
        match found {
            Some((mechanism, credential)) if usable(&credential) => self
                .check(user, mechanism, &credential, password)
                .then_some(mechanism),
            _ => {
                self.decoy(user, password);
                None
            }
        }
    }

    /// PBKDF2 derivations run so far (cache misses and decoys).
    pub fn derivations(&self) -> u64 {
        self.derivations.load(Ordering::Relaxed)
    }

    /// Entries currently cached.
    pub fn cached_entries(&self) -> usize {
        self.cache.len()
    }

    fn check(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        credential: &ScramCredential,
        password: &str,
    ) -> bool {
        let key = self.cache_key_for(user, mechanism, credential, password);
        if let Some(remembered) = self.cache.get(&key) {
            return constant_time_eq(&remembered, &credential.stored_key);
        }
        let derived = self.derive(mechanism, password, &credential.salt, credential.iterations);
        let matches = constant_time_eq(&derived.stored_key, &credential.stored_key);
        if matches {
            self.cache.insert(key, derived.stored_key);
        }
        matches
    }

    /// The work a real check does, against a salt nobody has.
    fn decoy(&self, user: &str, password: &str) {
        let salt = keyed_sha256(decoy_salt_key(), &[user.as_bytes()]);
        let salt = salt.get(..SALT_LEN).unwrap_or(&salt);
        let _ = self.derive(
            ScramMechanism::Sha512,
            password,
            salt,
            ScramMechanism::MIN_ITERATIONS,
        );
    }

    fn derive(
        &self,
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        self.derivations.fetch_add(1, Ordering::Relaxed);
        derive_credential(mechanism, password, salt, iterations)
    }

    fn cache_key_for(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        credential: &ScramCredential,
        password: &str,
    ) -> [u8; 32] {
        let fields: [&[u8]; 5] = [
            user.as_bytes(),
            mechanism.mechanism_name().as_bytes(),
            &credential.salt,
            &credential.iterations.to_be_bytes(),
            password.as_bytes(),
        ];
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        let lengths: Vec<[u8; 8]> = fields
            .iter()
            .map(|f| (f.len() as u64).to_be_bytes())
            .collect();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(fields.len() * 2);
        for (field, length) in fields.iter().zip(&lengths) {
            parts.push(length);
            parts.push(field);
        }
        keyed_sha256(&self.cache_key, &parts)
    }
}

impl Default for PasswordVerifier {
    fn default() -> Self {
        Self::new(DEFAULT_CACHE_CAPACITY)
    }
}

impl std::fmt::Debug for PasswordVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordVerifier")
            .field("cached_entries", &self.cached_entries())
            .field("derivations", &self.derivations())
            .finish_non_exhaustive()
    }
}

/// A credential PLAIN may check against: at least Kafka's minimum iteration count, and at most
/// the credential APIs' maximum (a larger count would let one stored record make every login
/// for that user arbitrarily expensive).
fn usable(credential: &ScramCredential) -> bool {
    (ScramMechanism::MIN_ITERATIONS..=ScramMechanism::MAX_ITERATIONS)
        .contains(&credential.iterations)
}

fn decoy_salt_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        key
    })
}
