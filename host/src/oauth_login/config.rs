//! The table of the OAuth login modules: `[plugins.config.oauth-client-credentials]` or
//! `[plugins.config.oauth-jwt-bearer]` (docs/configuration.md, "Upstream OAuth login").

use std::path::PathBuf;

use portcullis::secret::Secret;
use serde::Deserialize;

/// The environment variable that overrides `client_secret` (preferred: the secret then lives in
/// no file).
pub const CLIENT_SECRET_ENV: &str = "PORTCULLIS_UPSTREAM_OAUTH_CLIENT_SECRET";

/// The settings both grants share, and each grant's own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthLoginConfig {
    /// The token endpoint (`sasl.oauthbearer.token.endpoint.url`).
    pub token_endpoint_url: String,
    /// URL prefixes the token endpoint must start with (CVE-2025-27817).
    pub allowed_urls: Vec<String>,
    /// PEM CA bundle for an HTTPS endpoint; absent means the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The client id (client credentials: HTTP basic user).
    pub client_id: Option<String>,
    /// The client secret; `PORTCULLIS_UPSTREAM_OAUTH_CLIENT_SECRET` overrides it.
    pub client_secret: Option<Secret>,
    /// `scope` sent with the request.
    pub scope: Option<String>,
    /// `audience` sent with the request (Auth0, Okta style).
    pub audience: Option<String>,
    /// `resource` sent with the request (RFC 8707 resource indicator).
    pub resource: Option<String>,
    /// The claim of the returned JWT that names the principal (Kafka's `sasl.oauthbearer.sub.claim.name`).
    #[serde(default = "default_principal_claim")]
    pub principal_claim_name: String,
    /// Wait before the second attempt of a failed request, doubling (`sasl.login.retry.backoff.ms`).
    #[serde(default = "default_backoff_ms")]
    pub retry_backoff_ms: u64,
    /// No attempt later than this after the first (`sasl.login.retry.backoff.max.ms`).
    #[serde(default = "default_backoff_max_ms")]
    pub retry_backoff_max_ms: u64,
    /// JWT-bearer grant: PEM private key signing the assertion.
    pub assertion_private_key_file: Option<PathBuf>,
    /// JWT-bearer grant: RS256 (default) or ES256.
    #[serde(default = "default_assertion_algorithm")]
    pub assertion_algorithm: String,
    /// JWT-bearer grant: the `kid` header.
    pub assertion_key_id: Option<String>,
    /// JWT-bearer grant: `iss` (default: `client_id`).
    pub assertion_issuer: Option<String>,
    /// JWT-bearer grant: `sub` (default: `client_id`).
    pub assertion_subject: Option<String>,
    /// JWT-bearer grant: `aud` (default: the token endpoint).
    pub assertion_audience: Option<String>,
    /// JWT-bearer grant: the assertion's lifetime in seconds.
    #[serde(default = "default_assertion_lifetime")]
    pub assertion_lifetime_seconds: i64,
    /// JWT-bearer grant: how far before `iat` its `nbf` lies, seconds.
    #[serde(default = "default_assertion_nbf")]
    pub assertion_not_before_seconds: i64,
    /// JWT-bearer grant: whether the assertion carries a random `jti`.
    #[serde(default = "default_true")]
    pub assertion_include_jti: bool,
}

fn default_principal_claim() -> String {
    "sub".to_owned()
}
fn default_backoff_ms() -> u64 {
    100
}
fn default_backoff_max_ms() -> u64 {
    10_000
}
fn default_assertion_algorithm() -> String {
    "RS256".to_owned()
}
fn default_assertion_lifetime() -> i64 {
    300
}
fn default_assertion_nbf() -> i64 {
    60
}
fn default_true() -> bool {
    true
}
