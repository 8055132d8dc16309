//! `[delegation_tokens]`: Kafka's `delegation.token.*` settings, self-contained with their
//! validation and the rule for a secret kept in the configuration file.

use std::path::Path;

use portcullis::secret::Secret;
use portcullis::tokens::{
    DEFAULT_EXPIRY_CHECK_INTERVAL_MS, DEFAULT_EXPIRY_TIME_MS, DEFAULT_MAX_LIFETIME_MS,
};
use serde::Deserialize;

use super::{invalid, ConfigError};

/// The key read from the environment verbatim (`PORTCULLIS_DELEGATION_TOKENS__SECRET`).
pub const TOKEN_SECRET_KEY: &str = "delegation_tokens.secret";

/// `[delegation_tokens]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationTokensConfig {
    /// `delegation.token.secret.key`: the HMAC key of every token. Tokens are enabled iff
    /// it is set and not empty. From the file (which must then not be readable by other
    /// users) or from `PORTCULLIS_DELEGATION_TOKENS__SECRET`; never logged or echoed.
    #[serde(default, deserialize_with = "super::secret_string::deserialize")]
    pub secret: Option<Secret>,
    /// `delegation.token.max.lifetime.ms`.
    #[serde(default = "default_max_lifetime_ms")]
    pub max_lifetime_ms: i64,
    /// `delegation.token.expiry.time.ms`.
    #[serde(default = "default_expiry_time_ms")]
    pub expiry_time_ms: i64,
    /// `delegation.token.expiry.check.interval.ms`.
    #[serde(default = "default_expiry_check_interval_ms")]
    pub expiry_check_interval_ms: i64,
    /// Beyond Kafka: accept a SCRAM login whose user name is a live token id as that token,
    /// without the `tokenauth` extension (for librdkafka, kafkajs, franz-go). SCRAM users with
    /// token-id-shaped names are then refused (see docs/security.md).
    #[serde(default)]
    pub accept_token_without_extension: bool,
}

impl Default for DelegationTokensConfig {
    fn default() -> Self {
        Self {
            secret: None,
            max_lifetime_ms: default_max_lifetime_ms(),
            expiry_time_ms: default_expiry_time_ms(),
            expiry_check_interval_ms: default_expiry_check_interval_ms(),
            accept_token_without_extension: false,
        }
    }
}

fn default_max_lifetime_ms() -> i64 {
    DEFAULT_MAX_LIFETIME_MS
}
fn default_expiry_time_ms() -> i64 {
    DEFAULT_EXPIRY_TIME_MS
}
fn default_expiry_check_interval_ms() -> i64 {
    DEFAULT_EXPIRY_CHECK_INTERVAL_MS
}

impl DelegationTokensConfig {
    /// Whether tokens are enabled (Kafka: the secret is set and not empty).
    pub fn enabled(&self) -> bool {
        self.secret.as_ref().is_some_and(|s| !s.expose().is_empty())
    }

    /// Kafka's ranges: every duration at least 1 ms.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("delegation_tokens.max_lifetime_ms", self.max_lifetime_ms),
            ("delegation_tokens.expiry_time_ms", self.expiry_time_ms),
            (
                "delegation_tokens.expiry_check_interval_ms",
                self.expiry_check_interval_ms,
            ),
        ] {
            if value < 1 {
                return Err(invalid(key, format!("must be at least 1, got {value}")));
            }
        }
        if self.accept_token_without_extension && !self.enabled() {
            return Err(invalid(
                "delegation_tokens.accept_token_without_extension",
                "needs delegation_tokens.secret (tokens are disabled without it)",
            ));
        }
        Ok(())
    }
}

/// A secret in the configuration file is refused when other users may read the file, and
/// warned about loudly when its group may.
#[cfg(unix)]
pub(super) fn check_secret_file(path: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?
        .permissions()
        .mode();
    if mode & 0o004 != 0 {
        return Err(invalid(
            "delegation_tokens.secret",
            format!(
                "{} is readable by every user of this machine (mode {:o}) and holds the token secret: \
                 `chmod 600` it, or set PORTCULLIS_DELEGATION_TOKENS__SECRET instead",
                path.display(),
                mode & 0o777
            ),
        ));
    }
    if mode & 0o040 != 0 {
        tracing::warn!(
            file = %path.display(),
            mode = format!("{:o}", mode & 0o777),
            "the configuration file holds the delegation token secret and its group may read it; \
             anyone who reads it can mint every token's password"
        );
        eprintln!(
            "warning: {} holds delegation_tokens.secret and is readable by its group",
            path.display()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
pub(super) fn check_secret_file(_path: &Path) -> Result<(), ConfigError> {
    Ok(())
}
