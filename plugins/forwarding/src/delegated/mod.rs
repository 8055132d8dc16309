//! The `delegated` forwarding policy: the upstream sees the client's own principal.
//!
//! Requests bound upstream are routed with [`UpstreamIdentity::Delegated`]: the host opens the
//! connection with an upstream delegation token owned by the session's principal (KIP-373,
//! created by Portcullis' service principal, which holds `CreateTokens` on the `User` resource),
//! so the upstream authorizes, throttles and logs `User:alice`, not Portcullis. The tokens
//! themselves are managed by [`tokens::UpstreamTokens`] (sans-I/O) and the host's I/O around it.
//!
//! Only `User` principals can own a token the upstream authenticates as that user (a token's
//! session is always `User:<owner name>`). Any other principal is refused unless it matches one
//! of `service_fallback`, which sends it upstream as the service identity, explicitly.

pub mod tokens;

use std::sync::Arc;

use portcullis::errors::ErrorCode;
use portcullis::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};
use portcullis::plugin_api::parse_config;
use portcullis::principal::{Principal, USER_TYPE};
use portcullis::registry::{check_config, ForwardingSettings, PolicyFactory};
use portcullis::{Host, PluginError};
use serde::{Deserialize, Serialize};

/// `[forwarding.delegated]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegatedSettings {
    /// The maximum lifetime requested for each upstream token (`MaxLifetimeMs`; the upstream caps
    /// it with `delegation.token.max.lifetime.ms`). Tokens are renewed before they expire and
    /// replaced before this lifetime ends.
    #[serde(default = "default_token_lifetime_ms")]
    pub token_lifetime_ms: i64,
    /// A principal's upstream token is expired upstream after this long without a connection.
    #[serde(default = "default_idle_expire_ms")]
    pub idle_expire_ms: i64,
    /// Principal patterns (`User:svc-*`, `Group:ops`, `*`) that go upstream as the service
    /// identity instead: a trailing `*` matches any suffix.
    #[serde(default)]
    pub service_fallback: Vec<String>,
    /// Who authorizes upstream-bound requests: Portcullis' own authorizer first (`local`, the
    /// default: defence in depth) or only the upstream (`upstream`).
    #[serde(default)]
    pub authorizer: AuthorizerMode,
    /// The SCRAM mechanism upstream connections authenticate with the token.
    #[serde(default = "default_token_mechanism")]
    pub token_mechanism: String,
}

impl Default for DelegatedSettings {
    fn default() -> Self {
        Self {
            token_lifetime_ms: default_token_lifetime_ms(),
            idle_expire_ms: default_idle_expire_ms(),
            service_fallback: Vec::new(),
            authorizer: AuthorizerMode::default(),
            token_mechanism: default_token_mechanism(),
        }
    }
}

/// A value of `[forwarding.delegated]` that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct InvalidSetting {
    /// The key, relative to `[forwarding.delegated]`.
    pub key: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

impl InvalidSetting {
    fn new(key: &'static str, message: impl Into<String>) -> Self {
        Self {
            key,
            message: message.into(),
        }
    }
}

impl DelegatedSettings {
    /// Checks the values (the key named in the error is relative to `[forwarding.delegated]`).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.token_lifetime_ms <= 0 {
            return Err(InvalidSetting::new("token_lifetime_ms", "must be > 0"));
        }
        if self.idle_expire_ms < 0 {
            return Err(InvalidSetting::new("idle_expire_ms", "must be >= 0"));
        }
        if !["SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&self.token_mechanism.as_str()) {
            return Err(InvalidSetting::new(
                "token_mechanism",
                "must be SCRAM-SHA-256 or SCRAM-SHA-512 (delegation tokens authenticate with SCRAM)",
            ));
        }
        for pattern in &self.service_fallback {
            if pattern.is_empty() || (pattern != "*" && !pattern.contains(':')) {
                return Err(InvalidSetting::new(
                    "service_fallback",
                    format!("'{pattern}' is not a principal pattern (type:name, a trailing * allowed, or *)"),
                ));
            }
        }
        Ok(())
    }

    /// The identity `principal`'s upstream requests use, or `None` when it may not go upstream
    /// (only `User` principals can own a token the upstream authenticates as them).
    pub fn identity(&self, principal: &Principal) -> Option<UpstreamIdentity> {
        if self.falls_back(principal) {
            Some(UpstreamIdentity::Service)
        } else if principal.kind == USER_TYPE {
            Some(UpstreamIdentity::Delegated)
        } else {
            None
        }
    }

    /// Whether `principal` goes upstream as the service identity.
    pub fn falls_back(&self, principal: &Principal) -> bool {
        let text = principal.to_string();
        self.service_fallback
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => text.starts_with(prefix),
                None => *pattern == text,
            })
    }
}

/// Who authorizes upstream-bound requests under the `delegated` policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthorizerMode {
    /// Portcullis' own authorizer, then the upstream's (as the client's principal).
    #[default]
    Local,
    /// Allowed locally; the upstream decides alone.
    Upstream,
}

fn default_token_lifetime_ms() -> i64 {
    3_600_000
}
fn default_idle_expire_ms() -> i64 {
    600_000
}
fn default_token_mechanism() -> String {
    "SCRAM-SHA-512".to_owned()
}

/// The policy: security APIs local (as `passthrough`), everything else upstream as the client's
/// own principal.
#[derive(Debug, Clone)]
pub struct Delegated {
    settings: DelegatedSettings,
    deny_api_keys: Vec<i16>,
}

impl Delegated {
    /// Creates the policy.
    pub fn new(settings: DelegatedSettings, forwarding: &ForwardingSettings) -> Self {
        Self {
            settings,
            deny_api_keys: forwarding.deny_api_keys.clone(),
        }
    }

    /// The identity `principal`'s upstream requests use, or `None` when it may not go upstream.
    pub fn identity(&self, principal: &Principal) -> Option<UpstreamIdentity> {
        self.settings.identity(principal)
    }
}

impl ForwardingPolicy for Delegated {
    fn name(&self) -> &str {
        "delegated"
    }

    fn route(&self, request: &RequestInfo<'_>) -> Route {
        if self.deny_api_keys.contains(&request.api_key) {
            return Route::Reject(ErrorCode::POLICY_VIOLATION);
        }
        match Route::standard(request.api_key) {
            Route::Local => Route::Local,
            _ => match self.identity(request.principal) {
                Some(identity) => Route::Upstream { identity },
                // The upstream could not authenticate this principal as itself: refused (answered
                // as Kafka answers a request whose every resource is denied), never sent as the
                // service identity unless configured so.
                None => Route::Reject(ErrorCode::INVALID_PRINCIPAL_TYPE),
            },
        }
    }
}

fn build(
    config: &str,
    _host: &Host,
    settings: &ForwardingSettings,
) -> Result<Arc<dyn ForwardingPolicy>, PluginError> {
    let delegated: DelegatedSettings = parse_config(config)?;
    Ok(Arc::new(Delegated::new(delegated, settings)))
}

inventory::submit! {
    PolicyFactory {
        name: "delegated",
        build,
        check_config: check_config::<DelegatedSettings>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(fallback: &[&str]) -> Delegated {
        Delegated::new(
            DelegatedSettings {
                service_fallback: fallback.iter().map(|s| (*s).to_owned()).collect(),
                ..DelegatedSettings::default()
            },
            &ForwardingSettings::new(vec![]),
        )
    }

    #[test]
    fn users_go_upstream_as_themselves_and_security_apis_stay_local() {
        let p = Principal::user("alice");
        let policy = policy(&[]);
        assert_eq!(policy.route(&RequestInfo::new(17, 1, &p)), Route::Local);
        assert_eq!(policy.route(&RequestInfo::new(38, 3, &p)), Route::Local);
        assert_eq!(
            policy.route(&RequestInfo::new(0, 9, &p)),
            Route::Upstream {
                identity: UpstreamIdentity::Delegated
            }
        );
    }

    #[test]
    fn other_principal_types_are_refused_unless_they_fall_back() {
        let group = Principal {
            kind: "Group".into(),
            name: "ops".into(),
        };
        assert_eq!(
            policy(&[]).route(&RequestInfo::new(0, 9, &group)),
            Route::Reject(ErrorCode::INVALID_PRINCIPAL_TYPE)
        );
        assert_eq!(
            policy(&["Group:*"]).route(&RequestInfo::new(0, 9, &group)),
            Route::Upstream {
                identity: UpstreamIdentity::Service
            }
        );
        let svc = Principal::user("svc-etl");
        assert_eq!(
            policy(&["User:svc-*"]).route(&RequestInfo::new(3, 12, &svc)),
            Route::Upstream {
                identity: UpstreamIdentity::Service
            }
        );
        assert_eq!(
            policy(&["User:svc"]).route(&RequestInfo::new(3, 12, &svc)),
            Route::Upstream {
                identity: UpstreamIdentity::Delegated
            }
        );
    }

    #[test]
    fn settings_are_checked_and_parse_from_toml() {
        let s: DelegatedSettings = parse_config(
            "token_lifetime_ms = 5000\nidle_expire_ms = 100\nservice_fallback = [\"User:svc-*\"]\nauthorizer = \"upstream\"\n",
        )
        .unwrap();
        assert_eq!(s.authorizer, AuthorizerMode::Upstream);
        assert!(s.validate().is_ok());
        assert!(parse_config::<DelegatedSettings>("lifetime = 1").is_err());
        let bad = DelegatedSettings {
            service_fallback: vec!["alice".into()],
            ..DelegatedSettings::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "service_fallback");
    }
}
