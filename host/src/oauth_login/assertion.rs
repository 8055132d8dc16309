//! The JWT a login module signs to ask for a token with the JWT-bearer grant (RFC 7523 §2.1,
//! Kafka's KIP-1139 `JwtBearerJwtRetriever`): `iss`, `sub`, `aud`, `iat`, `exp`, `nbf` and,
//! unless turned off, a random `jti`, signed with the configured private key (RS256 or ES256).

use std::path::Path;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Map, Value};

/// The settings of the assertion (`assertion_*` keys).
#[derive(Debug, Clone)]
pub struct AssertionSettings {
    /// RS256 or ES256.
    pub algorithm: Algorithm,
    /// The `kid` header, when the provider needs one to find the public key.
    pub key_id: Option<String>,
    /// `iss`.
    pub issuer: String,
    /// `sub`.
    pub subject: String,
    /// `aud`.
    pub audience: String,
    /// `exp` − `iat`, seconds (KIP-1139's default: 300).
    pub lifetime_seconds: i64,
    /// `iat` − `nbf`, seconds (KIP-1139's default: 60).
    pub not_before_seconds: i64,
    /// Whether to add a random `jti`.
    pub include_jti: bool,
}

/// A private key that signs assertions.
pub struct AssertionSigner {
    settings: AssertionSettings,
    key: EncodingKey,
}

/// Why no assertion can be signed. Never holds key material.
#[derive(Debug, thiserror::Error)]
pub enum AssertionError {
    /// The key file cannot be read.
    #[error("cannot read the assertion key file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no PEM key of the algorithm's type.
    #[error("the assertion key file {path} holds no PEM {kind} private key (PKCS#8 or the traditional form)")]
    NotAKey {
        /// The file.
        path: String,
        /// RSA or EC.
        kind: &'static str,
    },
    /// Only RS256 and ES256 are signed.
    #[error("assertion algorithm {0} is not supported (RS256 or ES256)")]
    Algorithm(String),
    /// Signing failed.
    #[error("signing the assertion failed: {0}")]
    Sign(String),
}

/// Reads an algorithm name as the key `assertion_algorithm` spells it.
pub fn parse_algorithm(name: &str) -> Result<Algorithm, AssertionError> {
    match name {
        "RS256" => Ok(Algorithm::RS256),
        "ES256" => Ok(Algorithm::ES256),
        other => Err(AssertionError::Algorithm(other.to_owned())),
    }
}

impl AssertionSigner {
    /// Loads the private key from `path`.
    pub fn load(path: &Path, settings: AssertionSettings) -> Result<Self, AssertionError> {
        let pem = std::fs::read(path).map_err(|source| AssertionError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let not_a_key = |kind| AssertionError::NotAKey {
            path: path.display().to_string(),
            kind,
        };
        let key = match settings.algorithm {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).map_err(|_| not_a_key("RSA"))?,
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem).map_err(|_| not_a_key("EC"))?,
            other => return Err(AssertionError::Algorithm(format!("{other:?}"))),
        };
        Ok(Self { settings, key })
    }

    /// Signs an assertion valid from `now_ms`.
    pub fn sign(&self, now_ms: i64) -> Result<String, AssertionError> {
        let s = &self.settings;
        let now = now_ms / 1000;
        let mut claims = Map::new();
        claims.insert("iss".into(), Value::from(s.issuer.as_str()));
        claims.insert("sub".into(), Value::from(s.subject.as_str()));
        claims.insert("aud".into(), Value::from(s.audience.as_str()));
        claims.insert("iat".into(), Value::from(now));
        claims.insert("exp".into(), Value::from(now + s.lifetime_seconds));
        claims.insert("nbf".into(), Value::from(now - s.not_before_seconds));
        if s.include_jti {
            let jti: [u8; 16] = rand::random();
            let hex: String = jti.iter().map(|b| format!("{b:02x}")).collect();
            claims.insert("jti".into(), Value::from(hex));
        }
        let mut header = Header::new(s.algorithm);
        header.kid = s.key_id.clone();
        jsonwebtoken::encode(&header, &Value::Object(claims), &self.key)
            .map_err(|e| AssertionError::Sign(e.to_string()))
    }
}

impl std::fmt::Debug for AssertionSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssertionSigner")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
