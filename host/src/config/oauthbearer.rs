//! `[oauthbearer]`: the OAUTHBEARER mechanism's token validator (docs/configuration.md), checked
//! at load like the other sections: every error names its key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use portcullis::secret::Secret;
use serde::Deserialize;

use super::{invalid, ConfigError, ListenerConfig};
use crate::oauth::allow::{AllowList, UrlRefused};

/// The key read from the environment verbatim
/// (`PORTCULLIS_OAUTHBEARER__INTROSPECTION_CLIENT_SECRET`).
pub const INTROSPECTION_SECRET_KEY: &str = "oauthbearer.introspection_client_secret";
/// The mechanism's name in `listener.sasl_mechanisms`.
pub const OAUTHBEARER: &str = "OAUTHBEARER";

/// `validator`: how tokens are checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValidatorKind {
    /// Signed JWTs against a JSON Web Key Set (Kafka's KIP-768 validator).
    #[default]
    Jwks,
    /// Opaque tokens asked about at an RFC 7662 introspection endpoint.
    Introspection,
    /// Kafka's development validator: unsigned tokens, accepted as they say. Needs
    /// `allow_unsecured = true`.
    Unsecured,
}

impl ValidatorKind {
    /// The name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::Jwks => "jwks",
            Self::Introspection => "introspection",
            Self::Unsecured => "unsecured",
        }
    }
}

/// `[oauthbearer]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthBearerConfig {
    /// How tokens are checked.
    #[serde(default)]
    pub validator: ValidatorKind,
    /// The JSON Web Key Set (`https://…`, `http://…` or `file:…`); with `discovery_url`, taken
    /// from the provider's `jwks_uri` when absent.
    pub jwks_url: Option<String>,
    /// The provider's `…/.well-known/openid-configuration`: fills `jwks_url`, `expected_issuer`
    /// and `introspection_url` when they are absent, and is named in the challenge a refused
    /// client gets.
    pub discovery_url: Option<String>,
    /// The `iss` every token must carry; absent: not checked (unless discovery fills it).
    pub expected_issuer: Option<String>,
    /// Audiences, one of which the token's `aud` must hold; empty: not checked.
    #[serde(default)]
    pub expected_audience: Vec<String>,
    /// URL prefixes Portcullis may fetch from (see `crate::oauth::allow`). Empty: none.
    #[serde(default)]
    pub allowed_urls: Vec<String>,
    /// PEM CA bundle the provider's HTTPS certificate must chain to; absent: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The claim that names the principal.
    #[serde(default = "default_sub_claim")]
    pub sub_claim_name: String,
    /// The claim that holds the token's scopes.
    #[serde(default = "default_scope_claim")]
    pub scope_claim_name: String,
    /// The claim whose values become `Group:<name>` principals.
    pub groups_claim_name: Option<String>,
    /// Claims a token must carry with exactly these values.
    #[serde(default)]
    pub required_claims: BTreeMap<String, serde_json::Value>,
    /// Scopes a token must have (otherwise `insufficient_scope`).
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// Tolerance for `exp`, `iat` and `nbf`, in seconds.
    #[serde(default = "default_clock_skew_seconds")]
    pub clock_skew_seconds: u64,
    /// How often the key set is fetched again.
    #[serde(default = "default_jwks_refresh_ms")]
    pub jwks_refresh_ms: u64,
    /// The first wait before a failed fetch is tried again (doubling each time).
    #[serde(default = "default_jwks_retry_backoff_ms")]
    pub jwks_retry_backoff_ms: u64,
    /// How long one fetch is retried in all before it counts as failed.
    #[serde(default = "default_jwks_retry_backoff_max_ms")]
    pub jwks_retry_backoff_max_ms: u64,
    /// The shortest time between two refreshes asked for by tokens with an unknown `kid`.
    #[serde(default = "default_jwks_kid_refresh_min_interval_ms")]
    pub jwks_kid_refresh_min_interval_ms: u64,
    /// The RFC 7662 endpoint (`validator = "introspection"`).
    pub introspection_url: Option<String>,
    /// The client id Portcullis authenticates to the introspection endpoint with.
    pub introspection_client_id: Option<String>,
    /// Its secret; from the file or `PORTCULLIS_OAUTHBEARER__INTROSPECTION_CLIENT_SECRET`
    /// (verbatim); never logged or echoed.
    #[serde(default, deserialize_with = "super::secret_string::deserialize")]
    pub introspection_client_secret: Option<Secret>,
    /// How many introspection answers are kept (active and inactive tokens each; 0: none).
    #[serde(default = "default_introspection_cache_capacity")]
    pub introspection_cache_capacity: usize,
    /// How long an active token's answer is kept, in ms (never past the token's `exp`; 0: not
    /// kept).
    #[serde(default = "default_introspection_cache_ms")]
    pub introspection_cache_ms: u64,
    /// How long an inactive token's answer is kept, in ms (0: not kept).
    #[serde(default = "default_introspection_negative_cache_ms")]
    pub introspection_negative_cache_ms: u64,
    /// Must be `true` for `validator = "unsecured"`.
    #[serde(default)]
    pub allow_unsecured: bool,
    /// Timeout of one HTTP request to the provider (connect, send, read the whole answer).
    #[serde(default = "default_http_timeout_ms")]
    pub http_timeout_ms: u64,
}

fn default_sub_claim() -> String {
    "sub".to_owned()
}
fn default_scope_claim() -> String {
    "scope".to_owned()
}
fn default_clock_skew_seconds() -> u64 {
    30
}
fn default_jwks_refresh_ms() -> u64 {
    3_600_000
}
fn default_jwks_retry_backoff_ms() -> u64 {
    100
}
fn default_jwks_retry_backoff_max_ms() -> u64 {
    10_000
}
fn default_jwks_kid_refresh_min_interval_ms() -> u64 {
    10_000
}
fn default_introspection_cache_capacity() -> usize {
    10_000
}
fn default_introspection_cache_ms() -> u64 {
    60_000
}
fn default_introspection_negative_cache_ms() -> u64 {
    10_000
}
fn default_http_timeout_ms() -> u64 {
    10_000
}

/// The longest clock skew accepted (a day): more would make `exp` meaningless.
const MAX_CLOCK_SKEW_SECONDS: u64 = 86_400;
/// The keys that only the jwks validator reads.
const JWKS_ONLY: &str = "only used with validator = \"jwks\"";
/// The keys that only the introspection validator reads.
const INTROSPECTION_ONLY: &str = "only used with validator = \"introspection\"";

impl OAuthBearerConfig {
    /// The parsed `allowed_urls`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `oauthbearer.allowed_urls`.
    pub fn allow_list(&self) -> Result<AllowList, ConfigError> {
        AllowList::new(&self.allowed_urls)
            .map_err(|e| invalid("oauthbearer.allowed_urls", e.to_string()))
    }

    /// Checks `url`, the value of `key`, against `allowed_urls`: the rule every URL Portcullis
    /// fetches follows (the validators' here, and the upstream login module's token endpoint).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `key`.
    pub fn check_url(&self, key: &str, url: &str) -> Result<url::Url, ConfigError> {
        let allow = self.allow_list()?;
        allow.check(url).map_err(|e| invalid(key, url_message(&e)))
    }

    /// The clock skew in ms.
    pub fn clock_skew_ms(&self) -> i64 {
        i64::try_from(self.clock_skew_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let allow = self.allow_list()?;
        if self.allowed_urls.iter().any(|e| e.trim().is_empty()) {
            return Err(invalid("oauthbearer.allowed_urls", "an entry is empty"));
        }
        let set = |v: &Option<String>| v.is_some();
        let kind = self.validator;
        // Keys that another validator reads are refused, as they would be silently ignored.
        let refuse_if = |key: &str, present: bool, why: &str| {
            if present {
                Err(invalid(
                    key,
                    format!(
                        "{why} (it is \"{}\"); remove it or change the validator",
                        kind.name()
                    ),
                ))
            } else {
                Ok(())
            }
        };
        if kind != ValidatorKind::Jwks {
            refuse_if("oauthbearer.jwks_url", set(&self.jwks_url), JWKS_ONLY)?;
        }
        if kind != ValidatorKind::Introspection {
            refuse_if(
                "oauthbearer.introspection_url",
                set(&self.introspection_url),
                INTROSPECTION_ONLY,
            )?;
            refuse_if(
                "oauthbearer.introspection_client_id",
                set(&self.introspection_client_id),
                INTROSPECTION_ONLY,
            )?;
            refuse_if(
                "oauthbearer.introspection_client_secret",
                self.introspection_client_secret.is_some(),
                INTROSPECTION_ONLY,
            )?;
        }
        if kind != ValidatorKind::Unsecured && self.allow_unsecured {
            return Err(invalid(
                "oauthbearer.allow_unsecured",
                format!(
                    "only used with validator = \"unsecured\" (it is \"{}\"); remove it",
                    kind.name()
                ),
            ));
        }
        match kind {
            ValidatorKind::Unsecured => {
                if !self.allow_unsecured {
                    return Err(invalid(
                        "oauthbearer.validator",
                        "\"unsecured\" accepts unsigned tokens that anyone can write, for any \
                         user (Kafka's development validator); set allow_unsecured = true to \
                         use it anyway, never in production",
                    ));
                }
                refuse_if(
                    "oauthbearer.discovery_url",
                    set(&self.discovery_url),
                    "not used by validator = \"unsecured\"",
                )?;
                refuse_if(
                    "oauthbearer.expected_issuer",
                    set(&self.expected_issuer),
                    "not checked by validator = \"unsecured\"",
                )?;
                refuse_if(
                    "oauthbearer.expected_audience",
                    !self.expected_audience.is_empty(),
                    "not checked by validator = \"unsecured\"",
                )?;
            }
            ValidatorKind::Jwks => {
                if self.jwks_url.is_none() && self.discovery_url.is_none() {
                    return Err(invalid(
                        "oauthbearer.jwks_url",
                        "required with validator = \"jwks\" (or set discovery_url, whose \
                         jwks_uri is then used)",
                    ));
                }
            }
            ValidatorKind::Introspection => {
                if self.introspection_url.is_none() && self.discovery_url.is_none() {
                    return Err(invalid(
                        "oauthbearer.introspection_url",
                        "required with validator = \"introspection\" (or set discovery_url, \
                         whose introspection_endpoint is then used)",
                    ));
                }
                if self
                    .introspection_client_id
                    .as_deref()
                    .is_none_or(|id| id.trim().is_empty())
                {
                    return Err(invalid(
                        "oauthbearer.introspection_client_id",
                        "required with validator = \"introspection\" (the client Portcullis \
                         authenticates to the introspection endpoint as)",
                    ));
                }
                if self.introspection_client_secret.is_none() {
                    return Err(invalid(
                        INTROSPECTION_SECRET_KEY,
                        "required with validator = \"introspection\" (prefer \
                         PORTCULLIS_OAUTHBEARER__INTROSPECTION_CLIENT_SECRET)",
                    ));
                }
            }
        }
        // Every URL Portcullis would fetch must be on the operator's list.
        for (key, url) in [
            ("oauthbearer.jwks_url", &self.jwks_url),
            ("oauthbearer.discovery_url", &self.discovery_url),
            ("oauthbearer.introspection_url", &self.introspection_url),
        ] {
            let Some(url) = url else { continue };
            let parsed = allow
                .check(url)
                .map_err(|e| invalid(key, url_message(&e)))?;
            if parsed.scheme() == "file" && key != "oauthbearer.jwks_url" {
                return Err(invalid(
                    key,
                    format!("`{url}`: only jwks_url may be a file: URL; this one must be https://"),
                ));
            }
        }
        for (key, name) in [
            ("oauthbearer.sub_claim_name", Some(&self.sub_claim_name)),
            ("oauthbearer.scope_claim_name", Some(&self.scope_claim_name)),
            (
                "oauthbearer.groups_claim_name",
                self.groups_claim_name.as_ref(),
            ),
        ] {
            if name.is_some_and(|n| n.trim().is_empty()) {
                return Err(invalid(key, "must not be empty"));
            }
        }
        if let Some(issuer) = &self.expected_issuer {
            if issuer.trim().is_empty() {
                return Err(invalid(
                    "oauthbearer.expected_issuer",
                    "must not be empty (leave it out not to check the issuer)",
                ));
            }
        }
        for (key, list) in [
            ("oauthbearer.expected_audience", &self.expected_audience),
            ("oauthbearer.required_scopes", &self.required_scopes),
        ] {
            if list.iter().any(|v| v.trim().is_empty()) {
                return Err(invalid(key, "an entry is empty"));
            }
        }
        if self.required_claims.keys().any(|k| k.trim().is_empty()) {
            return Err(invalid(
                "oauthbearer.required_claims",
                "a claim name is empty",
            ));
        }
        if self.clock_skew_seconds > MAX_CLOCK_SKEW_SECONDS {
            return Err(invalid(
                "oauthbearer.clock_skew_seconds",
                format!(
                    "must be at most {MAX_CLOCK_SKEW_SECONDS} (a day), got {}",
                    self.clock_skew_seconds
                ),
            ));
        }
        for (key, value) in [
            ("oauthbearer.jwks_refresh_ms", self.jwks_refresh_ms),
            (
                "oauthbearer.jwks_retry_backoff_ms",
                self.jwks_retry_backoff_ms,
            ),
            ("oauthbearer.http_timeout_ms", self.http_timeout_ms),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be more than 0"));
            }
        }
        if self.jwks_retry_backoff_max_ms < self.jwks_retry_backoff_ms {
            return Err(invalid(
                "oauthbearer.jwks_retry_backoff_max_ms",
                format!(
                    "must be at least jwks_retry_backoff_ms ({}), got {}",
                    self.jwks_retry_backoff_ms, self.jwks_retry_backoff_max_ms
                ),
            ));
        }
        if let Some(ca_file) = &self.ca_file {
            if !ca_file.is_file() {
                return Err(invalid(
                    "oauthbearer.ca_file",
                    format!("{} is not a readable file", ca_file.display()),
                ));
            }
        }
        Ok(())
    }
}

/// The message for a refused URL: the key is named by the caller.
fn url_message(e: &UrlRefused) -> String {
    match e {
        UrlRefused::NotAllowed { .. } => {
            format!("{e} (CVE-2025-27817: Portcullis fetches only from listed prefixes)")
        }
        other => other.to_string(),
    }
}

/// `[oauthbearer]` against `[listener]`: OAUTHBEARER enabled needs the table, and the table is
/// only there for it (the upstream login modules have their own settings).
pub(super) fn validate_section(
    section: Option<&OAuthBearerConfig>,
    listener: &ListenerConfig,
) -> Result<(), ConfigError> {
    let enabled = listener.sasl_mechanisms.iter().any(|m| m == OAUTHBEARER);
    match section {
        None if enabled => Err(invalid(
            "listener.sasl_mechanisms",
            "OAUTHBEARER needs an [oauthbearer] table: at least validator, jwks_url (or \
             discovery_url) and allowed_urls (see docs/configuration.md)",
        )),
        None => Ok(()),
        Some(_) if !enabled => Err(invalid(
            "oauthbearer",
            "the table is set but listener.sasl_mechanisms does not enable OAUTHBEARER; add \
             \"OAUTHBEARER\" there or remove the table",
        )),
        Some(section) => section.validate(),
    }
}

/// A secret in the file is warned about when every user may read the file (the environment
/// override is the better place).
#[cfg(unix)]
pub(super) fn warn_if_secret_readable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode();
    if mode & 0o004 != 0 {
        tracing::warn!(
            file = %path.display(),
            mode = format!("{:o}", mode & 0o777),
            "the configuration file holds oauthbearer.introspection_client_secret and every user \
             may read it; chmod 600 it or set PORTCULLIS_OAUTHBEARER__INTROSPECTION_CLIENT_SECRET"
        );
        eprintln!(
            "warning: {} holds oauthbearer.introspection_client_secret and is readable by every user",
            path.display()
        );
    }
}

#[cfg(not(unix))]
pub(super) fn warn_if_secret_readable(_path: &std::path::Path) {}

#[cfg(test)]
mod tests;
