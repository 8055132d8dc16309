//! Building OAUTHBEARER's token validator and server from `[oauthbearer]`: the HTTP client,
//! the claim rules, each kind of validator, and the refusal log in front of them.

use std::sync::Arc;
use std::time::Duration;

use portcullis_plugin_oauthbearer::introspection::{
    CacheSettings, Introspect, IntrospectError, IntrospectionValidator,
};
use portcullis_plugin_oauthbearer::unsecured::{UnsecuredRules, UnsecuredValidator};
use portcullis_plugin_oauthbearer::{
    ClaimRules, OAuthBearerServer, Refusal, ServerSettings, TokenValidator, ValidatedToken,
};
use serde_json::{Map, Value};

use super::allow::AllowList;
use super::error::{config_error, OAuthError};
use super::http::{HttpClient, HttpSetupError};
use super::resolve::Resolved;
use crate::config::OAuthBearerConfig;
use crate::server::tls::TlsSetupError;

/// The HTTP client, verifying HTTPS against `ca_file` or the system's roots (needed only when
/// an https URL is allowed).
pub(super) fn http_client(
    config: &OAuthBearerConfig,
    allow: &AllowList,
) -> Result<HttpClient, OAuthError> {
    let needs_tls = allow.prefixes().iter().any(|p| p.starts_with("https:"));
    HttpClient::new(
        config.ca_file.clone(),
        needs_tls,
        Duration::from_millis(config.http_timeout_ms),
    )
    .map_err(|e| match e {
        HttpSetupError::Tls(TlsSetupError::NoSystemRoots(why)) => config_error(
            "oauthbearer.ca_file",
            format!(
                "no trusted root certificate found on this system ({why}); set \
                 oauthbearer.ca_file to the identity provider's CA bundle"
            ),
        ),
        other => config_error("oauthbearer.ca_file", other.to_string()),
    })
}

pub(super) fn claim_rules(config: &OAuthBearerConfig, resolved: &Resolved) -> ClaimRules {
    ClaimRules {
        expected_audience: config.expected_audience.clone(),
        expected_issuer: resolved.expected_issuer.clone(),
        sub_claim_name: config.sub_claim_name.clone(),
        scope_claim_name: config.scope_claim_name.clone(),
        groups_claim_name: config.groups_claim_name.clone(),
        required_claims: config.required_claims.clone(),
        required_scopes: config.required_scopes.clone(),
        clock_skew_ms: config.clock_skew_ms(),
    }
}

pub(super) fn introspection_validator(
    config: &OAuthBearerConfig,
    resolved: &Resolved,
    client: Arc<dyn Introspect>,
) -> Arc<dyn TokenValidator> {
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let cache = CacheSettings {
        capacity: config.introspection_cache_capacity,
        positive_ttl_ms: ms(config.introspection_cache_ms),
        negative_capacity: config.introspection_cache_capacity,
        negative_ttl_ms: ms(config.introspection_negative_cache_ms),
    };
    Arc::new(IntrospectionValidator::new(
        client,
        claim_rules(config, resolved),
        cache,
    ))
}

pub(super) fn unsecured_validator(config: &OAuthBearerConfig) -> Arc<dyn TokenValidator> {
    Arc::new(UnsecuredValidator::new(UnsecuredRules {
        principal_claim_name: config.sub_claim_name.clone(),
        scope_claim_name: config.scope_claim_name.clone(),
        required_scopes: config.required_scopes.clone(),
        clock_skew_ms: config.clock_skew_ms(),
    }))
}

pub(super) fn server(
    config: &OAuthBearerConfig,
    validator: Arc<dyn TokenValidator>,
) -> OAuthBearerServer {
    OAuthBearerServer::new(
        Arc::new(Logged(validator)),
        ServerSettings {
            openid_configuration: config.discovery_url.clone(),
        },
    )
}

/// Logs why a token was refused: the client sees only Kafka's JSON challenge. At debug, as
/// everything a client alone causes (docs/architecture.md, "Errors"); the reason never holds
/// the token.
struct Logged(Arc<dyn TokenValidator>);

impl TokenValidator for Logged {
    fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal> {
        let validated = self.0.validate(token, now_ms);
        if let Err(refusal) = &validated {
            tracing::debug!(status = %refusal.status, reason = %refusal.reason, "OAUTHBEARER token refused");
        }
        validated
    }

    fn is_cheap(&self) -> bool {
        self.0.is_cheap()
    }
}

/// The offline stand-in for the introspection endpoint.
pub(super) struct Offline;

impl Introspect for Offline {
    fn introspect(&self, _token: &str) -> Result<Map<String, Value>, IntrospectError> {
        Err(IntrospectError::Transport(
            "offline (check-config): the introspection endpoint is not called".to_owned(),
        ))
    }
}
