//! The configuration file (TOML) and its `PORTCULLIS_` environment overrides.
//!
//! The shape of `[node]`, `[plugins]`, `[listener]`, `[upstream]` and `[forwarding]` is a contract:
//! keys may be added, never renamed.
//!
//! [`load`] reads the file, overlays the environment and validates the result. Errors name the
//! key and, for the file, the line and column: figment (which does the layering) keeps no spans,
//! so the file is first checked on its own with `toml`, which does.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use portcullis::secret::Secret;
use serde::Deserialize;

mod authorization;
mod limits;
mod listener;
mod node;
mod oauthbearer;
mod parse;
mod secret_string;
mod store;
#[cfg(test)]
mod tests;
mod tokens;
mod upstream;

pub use authorization::*;
pub use limits::*;
pub use listener::*;
pub use node::*;
pub use oauthbearer::{OAuthBearerConfig, ValidatorKind, INTROSPECTION_SECRET_KEY, OAUTHBEARER};
use parse::*;
pub use store::*;
pub use tokens::{DelegationTokensConfig, TOKEN_SECRET_KEY};
pub use upstream::*;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// This node.
    pub node: NodeConfig,
    /// Dynamic plugins.
    #[serde(default)]
    pub plugins: PluginsConfig,
    /// The client listener.
    pub listener: ListenerConfig,
    /// The upstream cluster.
    pub upstream: UpstreamConfig,
    /// Request routing.
    #[serde(default)]
    pub forwarding: ForwardingConfig,
    /// Authorization of every request; absent means no authorizer (Kafka's default: everything
    /// is allowed, and the ACL APIs answer SECURITY_DISABLED).
    pub authorizer: Option<AuthorizerConfig>,
    /// The authorization audit log.
    #[serde(default)]
    pub audit: AuditConfig,
    /// Traces, metrics, log format and the admin endpoint (`crate::telemetry::config`).
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetryConfig,
    /// Delegation tokens (KIP-48); absent or without a secret, tokens are disabled.
    #[serde(default)]
    pub delegation_tokens: DelegationTokensConfig,
    /// The principal builder.
    #[serde(default)]
    pub principal: PrincipalConfig,
    /// Event subscribers.
    #[serde(default)]
    pub events: EventsConfig,
    /// Connection limits, idle timeouts and the failed-authentication throttle.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// What happens on SIGTERM / Ctrl-C.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Where the security metadata lives: the node's own file log (default) or a topic of the
    /// upstream cluster shared by several nodes.
    #[serde(default)]
    pub store: StoreConfig,
    /// The inter-node listener of a cluster of nodes (`[store] kind = "kafka"`).
    pub cluster: Option<ClusterConfig>,
    /// The OAUTHBEARER mechanism's token validator; required when `listener.sasl_mechanisms`
    /// enables OAUTHBEARER.
    pub oauthbearer: Option<OAuthBearerConfig>,
}

pub use crate::plugin_config::{
    ConfigSource, EventsConfig, PrincipalConfig, SubscriberConfig, UpstreamLoginConfig,
};

fn default_true() -> bool {
    true
}

/// The prefix of every environment override.
pub const ENV_PREFIX: &str = "PORTCULLIS_";
/// Separates the levels of an override's key: `PORTCULLIS_LISTENER__ADDRESS` is `listener.address`.
pub const ENV_SEPARATOR: &str = "__";
/// The mechanisms Portcullis can use to log in to the upstream cluster.
pub const UPSTREAM_SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// The top-level tables, used to recognise a mistyped override such as `PORTCULLIS_LISTENER_ADDRESS`.
const SECTIONS: [&str; 16] = [
    "node",
    "plugins",
    "listener",
    "upstream",
    "forwarding",
    "authorizer",
    "audit",
    "telemetry",
    "limits",
    "shutdown",
    "delegation_tokens",
    "principal",
    "events",
    "store",
    "cluster",
    "oauthbearer",
];
/// The key read from the environment verbatim instead of through figment's value parser, which
/// would turn `1234` into a number, and whose errors would quote it.
const PASSWORD_KEY: &str = "upstream.password";

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file is missing or unreadable.
    #[error("cannot read configuration file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// The file is not valid TOML, or a key in it is unknown or has the wrong type.
    #[error("{}, line {line}, column {column}{}: {message}", path.display(), in_key(key.as_deref()))]
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// The dotted key at that position, when it can be told.
        key: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// A key is missing or wrong after the environment was applied, without a file position.
    #[error("{}: key `{key}`: {message}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// The dotted key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An environment override is unknown or has the wrong type.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable (or variables) at fault.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// The configuration parses but does not make sense.
    #[error("invalid configuration: `{key}`: {message}")]
    Invalid {
        /// The dotted key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

fn in_key(key: Option<&str>) -> String {
    key.map(|k| format!(" (`{k}`)")).unwrap_or_default()
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// Loads `path`, applies the `PORTCULLIS_` environment overrides and validates the result.
///
/// # Errors
/// A [`ConfigError`] naming the file (and line), the environment variable or the key at fault.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with_env_prefix(path, ENV_PREFIX)
}

/// [`load`] with another environment prefix (tests use their own, so they cannot see each other's
/// variables).
fn load_with_env_prefix(path: &Path, prefix: &str) -> Result<Config, ConfigError> {
    let text = fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    check_file(path, &text)?;
    let overrides = EnvOverrides::scan(prefix, std::env::vars_os())?;

    let env = Env::prefixed(prefix)
        .split(ENV_SEPARATOR)
        // Variables without a separator are not configuration keys (scripts use
        // PORTCULLIS_CACHE and the like); `scan` has already refused mistyped keys.
        .filter(|key| key.as_str().contains('.'))
        .ignore(&[PASSWORD_KEY, TOKEN_SECRET_KEY, INTROSPECTION_SECRET_KEY]);
    let mut config: Config = Figment::new()
        .merge(Toml::string(&text))
        .merge(env)
        .extract()
        .map_err(|e| figment_error(path, prefix, &overrides, e))?;
    if let Some(password) = overrides.password {
        config.upstream.password = Some(Secret::new(password));
    }
    if let Some(secret) = overrides.token_secret {
        config.delegation_tokens.secret = Some(Secret::new(secret));
    } else if config.delegation_tokens.secret.is_some() {
        // The secret came from the file: the file must not be readable by other users.
        tokens::check_secret_file(path)?;
    }
    if let Some(section) = config.oauthbearer.as_mut() {
        // Taken verbatim, like the upstream password; without the table it has nothing to set.
        let var = overrides
            .keys
            .iter()
            .find(|(key, _)| key == INTROSPECTION_SECRET_KEY)
            .map(|(_, var)| var.clone());
        if let Some(var) = var {
            let value = std::env::var(&var).map_err(|_| ConfigError::Env {
                var,
                message: "not valid UTF-8".to_owned(),
            })?;
            section.introspection_client_secret = Some(Secret::new(value));
        } else if section.introspection_client_secret.is_some() {
            oauthbearer::warn_if_secret_readable(path);
        }
    }
    config.validate()?;
    config.plugins.source = Some(ConfigSource {
        path: path.to_owned(),
        text,
    });
    Ok(config)
}

impl Config {
    /// Checks what the types cannot: addresses parse, files exist, combinations make sense.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first key at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.node.validate()?;
        self.plugins.validate()?;
        self.listener.validate()?;
        self.upstream.validate()?;
        self.forwarding.validate()?;
        self.limits
            .validate(self.listener.failed_authentication_delay_ms)?;
        if let Some(authorizer) = &self.authorizer {
            authorizer.validate()?;
        }
        self.telemetry
            .validate()
            .map_err(|(key, reason)| invalid(key, reason))?;
        self.delegation_tokens.validate()?;
        self.events.validate()?;
        self.store.validate(self.cluster.as_ref(), &self.upstream)?;
        oauthbearer::validate_section(self.oauthbearer.as_ref(), &self.listener)?;
        Ok(())
    }
}
