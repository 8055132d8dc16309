//! Credentials as mechanisms see them: SCRAM credentials and delegation tokens, read through
//! read-only views answered from memory (so a SASL step never blocks), and what identifies the
//! credential behind a session.

use std::fmt;

/// The SCRAM hash functions Kafka supports, with their wire type bytes (KIP-554).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256, type byte 1.
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    /// SCRAM-SHA-512, type byte 2.
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl ScramMechanism {
    /// Every SCRAM mechanism.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];
    /// The minimum iteration count Kafka accepts.
    pub const MIN_ITERATIONS: u32 = 4096;
    /// The maximum iteration count the credential APIs accept.
    pub const MAX_ITERATIONS: u32 = 16384;

    /// The SASL mechanism name.
    pub fn mechanism_name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }
    /// The wire type byte.
    pub fn type_byte(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }
    /// The mechanism for a wire type byte.
    pub fn from_type_byte(b: i8) -> Option<Self> {
        match b {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }
    /// The mechanism for a SASL mechanism name.
    pub fn from_mechanism_name(name: &str) -> Option<Self> {
        match name {
            "SCRAM-SHA-256" => Some(ScramMechanism::Sha256),
            "SCRAM-SHA-512" => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }
    /// The digest length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mechanism_name())
    }
}

/// What authenticated a session: the thing whose removal or change must end the session.
///
/// Sessions are revoked by this, never by principal name: a principal builder may rename
/// principals, and one user can hold password sessions and token sessions at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CredentialId {
    /// A stored SCRAM credential: the user and the mechanism of the credential that verified the
    /// password (SCRAM, and PLAIN, which checks passwords against the SCRAM credentials).
    Scram {
        /// The user name the credential is stored under.
        user: String,
        /// Its mechanism.
        mechanism: ScramMechanism,
    },
    /// A delegation token.
    Token {
        /// The token id.
        token_id: String,
    },
    /// What a plugin mechanism reports, in its own terms (by default its mechanism name and the
    /// authorization id). A plugin revokes such sessions by publishing
    /// [`Event::CredentialRevoked`](crate::events::Event::CredentialRevoked) with the same value.
    Plugin {
        /// The mechanism name.
        mechanism: String,
        /// A key of the plugin's choosing.
        key: String,
    },
}

impl CredentialId {
    /// A stored SCRAM credential.
    pub fn scram(user: impl Into<String>, mechanism: ScramMechanism) -> Self {
        CredentialId::Scram {
            user: user.into(),
            mechanism,
        }
    }
    /// A delegation token.
    pub fn token(token_id: impl Into<String>) -> Self {
        CredentialId::Token {
            token_id: token_id.into(),
        }
    }
    /// A plugin mechanism's credential.
    pub fn plugin(mechanism: impl Into<String>, key: impl Into<String>) -> Self {
        CredentialId::Plugin {
            mechanism: mechanism.into(),
            key: key.into(),
        }
    }
}

/// A stored SCRAM credential (RFC 5802): never the password itself.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScramCredential {
    /// The salt.
    pub salt: Vec<u8>,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
    /// The PBKDF2 iteration count.
    pub iterations: u32,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Read-only access to user credentials, answered from memory so that a SASL step never blocks.
pub trait CredentialView: Send + Sync {
    /// The user's SCRAM credential for `mechanism`, if any.
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
}

/// A delegation token as a mechanism sees it when a client authenticates with `tokenauth=true`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TokenCredential {
    /// The token owner's name: the authorization id of the session.
    pub owner_name: String,
    /// The token's SCRAM credential (its password is the token HMAC).
    pub credential: ScramCredential,
    /// The token's current expiry, in ms since the epoch.
    pub expiry_ms: i64,
}

impl TokenCredential {
    /// A token credential: the owner's name, the token's SCRAM credential and its expiry.
    pub fn new(owner_name: impl Into<String>, credential: ScramCredential, expiry_ms: i64) -> Self {
        Self {
            owner_name: owner_name.into(),
            credential,
            expiry_ms,
        }
    }
}

/// Read-only access to delegation tokens (the host's token manager implements it).
pub trait TokenView: Send + Sync {
    /// The token with this id, with its SCRAM credential for `mechanism`.
    fn token(&self, token_id: &str, mechanism: ScramMechanism) -> Option<TokenCredential>;
    /// Whether a SCRAM login for `name` *without* the `tokenauth` extension is a token login
    /// (the opt-in `accept_token_without_extension`, for clients that cannot send the extension:
    /// then `name` has the shape of a token id, which no SCRAM user may have).
    fn accepts_token_without_extension(&self, name: &str) -> bool {
        let _ = name;
        false
    }
}

/// A token view that knows no tokens (used while delegation tokens are disabled).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTokens;

impl TokenView for NoTokens {
    fn token(&self, _token_id: &str, _mechanism: ScramMechanism) -> Option<TokenCredential> {
        None
    }
}

/// A credential view that knows no users (a host that keeps none, and tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCredentials;

impl CredentialView for NoCredentials {
    fn scram(&self, _user: &str, _mechanism: ScramMechanism) -> Option<ScramCredential> {
        None
    }
}
