//! OAUTHBEARER's start-up I/O on the OAuth runtime: discovery when it has something to fill,
//! then the first key set ([`Resolved`]: the URLs and issuer in use).

use std::time::Duration;

use url::Url;

use super::allow::AllowList;
use super::discovery;
use super::error::{config_error, OAuthError};
use super::http::HttpClient;
use super::jwks_refresh::{JwksRefresher, JwksSource, RefreshSettings};
use super::retry::Backoff;
use crate::config::{OAuthBearerConfig, ValidatorKind};

/// What discovery and the configuration resolved to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The key set's URL (`jwks`).
    pub jwks_url: Option<Url>,
    /// The introspection endpoint (`introspection`).
    pub introspection_url: Option<Url>,
    /// The issuer tokens must carry.
    pub expected_issuer: Option<String>,
    /// Which of these came from the discovery document.
    pub discovered: Vec<&'static str>,
}

/// What start-up does on the OAuth runtime: discovery when it has something to fill, then the
/// first key set.
pub(super) async fn start_io(
    config: &OAuthBearerConfig,
    allow: &AllowList,
    http: &HttpClient,
) -> Result<(Resolved, Option<JwksRefresher>), OAuthError> {
    let backoff = backoff(config);
    let max_ms = config.jwks_retry_backoff_max_ms;
    let checked = |key: &str, url: &Option<String>| -> Result<Option<Url>, OAuthError> {
        url.as_deref()
            .map(|u| allow.check(u).map_err(|e| config_error(key, e.to_string())))
            .transpose()
    };
    let mut resolved = Resolved {
        jwks_url: checked("oauthbearer.jwks_url", &config.jwks_url)?,
        introspection_url: checked("oauthbearer.introspection_url", &config.introspection_url)?,
        expected_issuer: config.expected_issuer.clone(),
        discovered: Vec::new(),
    };
    let wants_jwks = config.validator == ValidatorKind::Jwks && resolved.jwks_url.is_none();
    let wants_introspection =
        config.validator == ValidatorKind::Introspection && resolved.introspection_url.is_none();
    let wants_issuer =
        config.validator != ValidatorKind::Unsecured && resolved.expected_issuer.is_none();
    if let Some(discovery_url) = checked("oauthbearer.discovery_url", &config.discovery_url)? {
        if wants_jwks || wants_introspection || wants_issuer {
            let metadata = discovery::discover(http, &discovery_url, backoff)
                .await
                .map_err(|e| OAuthError::Fetch {
                    key: "oauthbearer.discovery_url".to_owned(),
                    what: "OpenID provider configuration",
                    url: discovery_url.to_string(),
                    reason: e.error.to_string(),
                    attempts: e.attempts,
                    max_ms,
                })?;
            let from_discovery = |key: &str, member: &str, value: Option<&String>| {
                let value = value.ok_or_else(|| {
                    config_error(
                        key,
                        format!(
                            "not set, and the provider configuration at {discovery_url} has no \
                             `{member}`; set {key}"
                        ),
                    )
                })?;
                discovery::check_discovered(allow, value).map_err(|reason| {
                    config_error(
                        format!("{key} (`{member}` from oauthbearer.discovery_url)"),
                        reason.to_string(),
                    )
                })
            };
            if wants_jwks {
                resolved.jwks_url = Some(from_discovery(
                    "oauthbearer.jwks_url",
                    "jwks_uri",
                    metadata.jwks_uri.as_ref(),
                )?);
                resolved.discovered.push("jwks_url");
            }
            if wants_introspection {
                resolved.introspection_url = Some(from_discovery(
                    "oauthbearer.introspection_url",
                    "introspection_endpoint",
                    metadata.introspection_endpoint.as_ref(),
                )?);
                resolved.discovered.push("introspection_url");
            }
            if wants_issuer {
                if let Some(issuer) = metadata.issuer.filter(|i| !i.trim().is_empty()) {
                    if let Some(implied) = discovery::implied_issuer(&discovery_url) {
                        if implied.trim_end_matches('/') != issuer.trim_end_matches('/') {
                            tracing::warn!(
                                discovery_url = %discovery_url,
                                issuer = %issuer,
                                "the provider configuration names another issuer than its URL \
                                 implies (OpenID Connect Discovery §4.3); tokens must carry the \
                                 document's; set expected_issuer to choose"
                            );
                        }
                    }
                    resolved.expected_issuer = Some(issuer);
                    resolved.discovered.push("expected_issuer");
                }
            }
        }
    }
    let refresher = match (config.validator, &resolved.jwks_url) {
        (ValidatorKind::Jwks, Some(url)) => {
            let source = JwksSource::new(url.clone(), http.clone());
            let settings = RefreshSettings {
                interval: Duration::from_millis(config.jwks_refresh_ms),
                backoff,
                kid_min_interval: Duration::from_millis(config.jwks_kid_refresh_min_interval_ms),
            };
            let key = if resolved.discovered.contains(&"jwks_url") {
                "oauthbearer.jwks_url (from oauthbearer.discovery_url)"
            } else {
                "oauthbearer.jwks_url"
            };
            Some(
                JwksRefresher::start(source, settings)
                    .await
                    .map_err(|e| OAuthError::Fetch {
                        key: key.to_owned(),
                        what: "key set",
                        url: url.to_string(),
                        reason: e.error.to_string(),
                        attempts: e.attempts,
                        max_ms,
                    })?,
            )
        }
        (ValidatorKind::Jwks, None) => {
            return Err(config_error(
                "oauthbearer.jwks_url",
                "required with validator = \"jwks\" (or discovery_url)",
            ))
        }
        _ => None,
    };
    Ok((resolved, refresher))
}

fn backoff(config: &OAuthBearerConfig) -> Backoff {
    Backoff {
        initial: Duration::from_millis(config.jwks_retry_backoff_ms),
        max_total: Duration::from_millis(config.jwks_retry_backoff_max_ms),
    }
}
