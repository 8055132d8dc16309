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
    /// Security counters.
    #[serde(default)]
    pub metrics: MetricsConfig,
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
}

/// `[limits]`: what a client, or a flood of them, may cost. Kafka's names where Kafka has them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Connections open at once, all listeners together (Kafka `max.connections`). When reached,
    /// the listeners stop accepting until a connection closes.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections open at once from one client address (Kafka `max.connections.per.ip`);
    /// absent means no limit, Kafka's default. A connection beyond it is closed at once.
    pub max_connections_per_ip: Option<u32>,
    /// An authenticated connection with nothing outstanding and no traffic for this long is
    /// closed (Kafka `connections.max.idle.ms`).
    #[serde(default = "default_connections_max_idle_ms")]
    pub connections_max_idle_ms: u64,
    /// A client must finish authenticating this long after it connected, or it is closed.
    #[serde(default = "default_authentication_timeout_ms")]
    pub authentication_timeout_ms: u64,
    /// Bytes that unauthenticated connections may buffer together for SASL frames larger than
    /// 8 KiB; a frame the budget cannot cover closes its connection.
    #[serde(default = "default_max_pre_auth_buffer_bytes")]
    pub max_pre_auth_buffer_bytes: usize,
    /// The least time between the last answer written to a client and the end of its connection
    /// (the FIN). Some clients (kafka-python 2.x) throw away answers that arrive together with
    /// the end of the connection, and resend a Produce that was already written.
    #[serde(default = "default_close_pause_ms")]
    pub close_pause_ms: u64,
    /// How failed authentications are delayed beyond `listener.failed_authentication_delay_ms`.
    #[serde(default)]
    pub failed_authentication: FailedAuthenticationLimits,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: default_max_connections(),
            max_connections_per_ip: None,
            connections_max_idle_ms: default_connections_max_idle_ms(),
            authentication_timeout_ms: default_authentication_timeout_ms(),
            max_pre_auth_buffer_bytes: default_max_pre_auth_buffer_bytes(),
            close_pause_ms: default_close_pause_ms(),
            failed_authentication: FailedAuthenticationLimits::default(),
        }
    }
}

/// `[limits.failed_authentication]`: the delay of a failed authentication grows with the recent
/// failures of the client's address and of the user name it claimed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedAuthenticationLimits {
    /// Failures (per address and per user name) answered after the base delay alone.
    #[serde(default = "default_free_failures")]
    pub free_failures: u32,
    /// The longest delay; each failure past `free_failures` doubles the delay up to it.
    #[serde(default = "default_failed_auth_max_delay_ms")]
    pub max_delay_ms: u64,
    /// Failures are forgotten gradually: their count halves every `half_life_ms`.
    #[serde(default = "default_failed_auth_half_life_ms")]
    pub half_life_ms: u64,
}

impl Default for FailedAuthenticationLimits {
    fn default() -> Self {
        Self {
            free_failures: default_free_failures(),
            max_delay_ms: default_failed_auth_max_delay_ms(),
            half_life_ms: default_failed_auth_half_life_ms(),
        }
    }
}

/// `[shutdown]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// On SIGTERM or Ctrl-C Portcullis stops accepting, answers every request it already
    /// forwarded, closes each connection, and exits; at the latest after this long.
    #[serde(default = "default_shutdown_grace_ms")]
    pub grace_ms: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            grace_ms: default_shutdown_grace_ms(),
        }
    }
}

fn default_max_connections() -> usize {
    10_000
}
fn default_connections_max_idle_ms() -> u64 {
    600_000
}
fn default_authentication_timeout_ms() -> u64 {
    10_000
}
fn default_max_pre_auth_buffer_bytes() -> usize {
    64 * 1024 * 1024
}
fn default_close_pause_ms() -> u64 {
    1_000
}
fn default_free_failures() -> u32 {
    3
}
fn default_failed_auth_max_delay_ms() -> u64 {
    5_000
}
fn default_failed_auth_half_life_ms() -> u64 {
    60_000
}
fn default_shutdown_grace_ms() -> u64 {
    8_000
}

pub use crate::plugin_config::{
    ConfigSource, EventsConfig, PrincipalConfig, SubscriberConfig, UpstreamLoginConfig,
};

/// `[authorizer]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizerConfig {
    /// The authorizer plugin (`acl`).
    #[serde(default = "default_authorizer")]
    pub plugin: String,
    /// Principals (`type:name`) allowed everything (Kafka `super.users`).
    #[serde(default)]
    pub super_users: Vec<String>,
    /// Allow an action on a resource that has no ACL at all (Kafka `allow.everyone.if.no.acl.found`).
    #[serde(default)]
    pub allow_everyone_if_no_acl_found: bool,
}

/// `[audit]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Where to append one JSON object per authorization decision; absent disables the log.
    pub file: Option<PathBuf>,
    /// Write allowed decisions.
    #[serde(default)]
    pub log_allowed: bool,
    /// Write denied decisions.
    #[serde(default = "default_true")]
    pub log_denied: bool,
}

/// `[metrics]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// A JSON file rewritten with the security counters every `snapshot_interval_ms`.
    pub snapshot_file: Option<PathBuf>,
    /// How often the snapshot is written.
    #[serde(default = "default_snapshot_interval_ms")]
    pub snapshot_interval_ms: u64,
    /// How often the counters are logged at info level (0 disables).
    #[serde(default = "default_metrics_log_interval_ms")]
    pub log_interval_ms: u64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            snapshot_file: None,
            snapshot_interval_ms: default_snapshot_interval_ms(),
            log_interval_ms: default_metrics_log_interval_ms(),
        }
    }
}

fn default_authorizer() -> String {
    "acl".to_owned()
}
fn default_true() -> bool {
    true
}
fn default_snapshot_interval_ms() -> u64 {
    1_000
}
fn default_metrics_log_interval_ms() -> u64 {
    60_000
}

/// `[node]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The node id.
    pub id: i32,
    /// Where the metadata log lives (relative paths are relative to the working directory).
    pub data_dir: PathBuf,
}

/// `[plugins]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    /// Every `*.so` here is loaded at start.
    pub dir: Option<PathBuf>,
    /// Per-plugin configuration tables, `[plugins.config.<PLUGIN-NAME>]`, handed to the plugin as TOML text.
    #[serde(default)]
    pub config: BTreeMap<String, toml::Table>,
    /// The file the configuration was loaded from, to point plugin errors at its lines.
    #[serde(skip)]
    pub source: Option<ConfigSource>,
}

/// `[listener]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// The listener's name, used in logs and contexts.
    #[serde(default = "default_listener_name")]
    pub name: String,
    /// The bootstrap address clients connect to.
    pub address: String,
    /// The host written into rewritten broker addresses.
    pub advertised_host: String,
    /// The upstream broker with node id N is served at `broker_port_base + N`.
    pub broker_port_base: u16,
    /// Enabled SASL mechanisms, in preference order.
    pub sasl_mechanisms: Vec<String>,
    /// TLS on the listener (SASL_SSL); absent means SASL_PLAINTEXT.
    pub tls: Option<TlsConfig>,
    /// Largest frame before authentication (Kafka `sasl.server.max.receive.size`).
    #[serde(default = "default_max_pre_auth_frame")]
    pub max_pre_auth_frame_bytes: usize,
    /// Largest frame after authentication (Kafka `socket.request.max.bytes`).
    #[serde(default = "default_max_frame")]
    pub max_frame_bytes: usize,
    /// Delay before closing a connection whose authentication failed (Kafka `connection.failed.authentication.delay.ms`).
    #[serde(default = "default_failed_auth_delay_ms")]
    pub failed_authentication_delay_ms: u64,
    /// KIP-368 `connections.max.reauth.ms`; 0 disables.
    #[serde(default)]
    pub connections_max_reauth_ms: i64,
    /// Per-mechanism overrides of `connections_max_reauth_ms` (Kafka's
    /// `listener.name.<l>.<mechanism>.connections.max.reauth.ms`); 0 disables for that mechanism.
    #[serde(default)]
    pub connections_max_reauth_ms_by_mechanism: BTreeMap<String, i64>,
}

/// `[listener.tls]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// Whether client certificates are asked for.
    #[serde(default)]
    pub client_auth: ClientAuth,
    /// PEM CA bundle that client certificates must chain to (required unless `client_auth = "none"`).
    pub ca_file: Option<PathBuf>,
}

/// `client_auth`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// No client certificate is requested.
    #[default]
    None,
    /// A certificate is requested and verified if sent.
    Requested,
    /// A verified certificate is required.
    Required,
}

/// `[upstream]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Bootstrap brokers of the upstream cluster.
    pub bootstrap_servers: Vec<String>,
    /// `PLAINTEXT` or `SASL_PLAINTEXT`.
    #[serde(default)]
    pub security_protocol: SecurityProtocol,
    /// The mechanism for `SASL_PLAINTEXT`.
    pub sasl_mechanism: Option<String>,
    /// The user for `SASL_PLAINTEXT`.
    pub username: Option<String>,
    /// The password for `SASL_PLAINTEXT`. Read from the file or from
    /// `PORTCULLIS_UPSTREAM__PASSWORD` verbatim; never echoed in an error.
    #[serde(default, deserialize_with = "secret_string::deserialize")]
    pub password: Option<Secret>,
    /// Timeout for connecting and authenticating upstream.
    #[serde(default = "default_upstream_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// TLS to the brokers, for `SSL` and `SASL_SSL`; absent means the defaults (the system's
    /// trusted roots, no client certificate, server names verified).
    pub tls: Option<UpstreamTlsConfig>,
    /// `[upstream.login]`: the login module (absent: the built-in `password` one).
    pub login: Option<UpstreamLoginConfig>,
}

/// The upstream security protocol (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum SecurityProtocol {
    /// No authentication, no TLS.
    #[default]
    #[serde(rename = "PLAINTEXT")]
    Plaintext,
    /// SASL without TLS.
    #[serde(rename = "SASL_PLAINTEXT")]
    SaslPlaintext,
    /// TLS, no SASL (the brokers may authenticate Portcullis by its client certificate).
    #[serde(rename = "SSL")]
    Ssl,
    /// SASL over TLS.
    #[serde(rename = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether Portcullis logs in to the brokers with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }

    /// Whether connections to the brokers use TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslSsl => "SASL_SSL",
        }
    }
}

/// `[upstream.tls]`: how Portcullis verifies the brokers and, optionally, proves who it is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// PEM CA bundle the brokers' certificates must chain to; absent means the system's trusted
    /// roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured).
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain Portcullis presents to the brokers (mutual TLS); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Check that each broker's certificate names the host Portcullis connects to (the bootstrap
    /// server's host, or the broker's advertised host). Turn off only for tests.
    #[serde(default = "default_true")]
    pub verify_server_name: bool,
}

impl Default for UpstreamTlsConfig {
    fn default() -> Self {
        Self {
            ca_file: None,
            cert_file: None,
            key_file: None,
            verify_server_name: true,
        }
    }
}

/// `[forwarding]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardingConfig {
    /// The policy name.
    #[serde(default = "default_policy")]
    pub policy: String,
    /// API keys refused outright.
    #[serde(default)]
    pub deny_api_keys: Vec<i16>,
}

impl Default for ForwardingConfig {
    fn default() -> Self {
        Self {
            policy: default_policy(),
            deny_api_keys: Vec::new(),
        }
    }
}

fn default_listener_name() -> String {
    "external".to_owned()
}
fn default_max_pre_auth_frame() -> usize {
    portcullis::connection::DEFAULT_MAX_PRE_AUTH_FRAME
}
fn default_max_frame() -> usize {
    portcullis::connection::DEFAULT_MAX_FRAME
}
fn default_failed_auth_delay_ms() -> u64 {
    100
}
fn default_upstream_timeout_ms() -> u64 {
    10_000
}
fn default_policy() -> String {
    "passthrough".to_owned()
}

/// The prefix of every environment override.
pub const ENV_PREFIX: &str = "PORTCULLIS_";
/// Separates the levels of an override's key: `PORTCULLIS_LISTENER__ADDRESS` is `listener.address`.
pub const ENV_SEPARATOR: &str = "__";
/// The mechanisms Portcullis can use to log in to the upstream cluster.
pub const UPSTREAM_SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// The top-level tables, used to recognise a mistyped override such as `PORTCULLIS_LISTENER_ADDRESS`.
const SECTIONS: [&str; 13] = [
    "node",
    "plugins",
    "listener",
    "upstream",
    "forwarding",
    "authorizer",
    "audit",
    "metrics",
    "limits",
    "shutdown",
    "delegation_tokens",
    "principal",
    "events",
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
        .ignore(&[PASSWORD_KEY, TOKEN_SECRET_KEY]);
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
        tokens_config::check_secret_file(path)?;
    }
    config.validate()?;
    config.plugins.source = Some(ConfigSource {
        path: path.to_owned(),
        text,
    });
    Ok(config)
}

/// Checks the file alone with `toml`, whose errors carry positions. A missing key is let through:
/// the environment may supply it, and figment reports it otherwise.
fn check_file(path: &Path, text: &str) -> Result<(), ConfigError> {
    match toml::from_str::<Config>(text) {
        Ok(_) => Ok(()),
        Err(e) if e.message().starts_with("missing field") => Ok(()),
        Err(e) => {
            let offset = e.span().map_or(0, |s| s.start);
            let (line, column) = line_and_column(text, offset);
            let key = key_at(text, offset);
            let message = readable(&e.message().trim().replace('\n', "; "), key.as_deref());
            Err(ConfigError::File {
                path: path.to_owned(),
                line,
                column,
                key,
                message,
            })
        }
    }
}

/// Rewrites serde's and figment's wording for people: `expected u16` becomes "expected a port
/// (1–65535)" for a port key and "expected a whole number (0 or more)" otherwise, `i32` and
/// friends "an integer"; figment's doubled quoting (``expected `one of `a`, `b```) loses a level.
fn readable(message: &str, key: Option<&str>) -> String {
    let mut text = message.to_owned();
    // figment quotes serde's "one of `a`, `b`" list once more.
    if let Some(start) = text.find("expected `one of ") {
        let list_start = start + "expected `".len();
        if text.ends_with('`') {
            text.pop();
        }
        text.replace_range(start..list_start, "expected ");
    }
    text = text
        .replace("invalid value signed int ", "invalid value ")
        .replace("invalid value unsigned int ", "invalid value ")
        .replace("invalid value: integer ", "invalid value ");
    let is_port = key.is_some_and(|k| k.ends_with("port") || k.ends_with("port_base"));
    let unsigned = if is_port {
        "a port (1–65535)"
    } else {
        "a whole number (0 or more)"
    };
    for (rust, plain) in [
        ("u8", unsigned),
        ("u16", unsigned),
        ("u32", unsigned),
        ("u64", unsigned),
        ("usize", unsigned),
        ("i8", "an integer"),
        ("i16", "an integer"),
        ("i32", "an integer"),
        ("i64", "an integer"),
        ("isize", "an integer"),
        ("f32", "a number"),
        ("f64", "a number"),
    ] {
        let expected = format!("expected {rust}");
        if text.ends_with(&expected) || text.contains(&format!("{expected} ")) {
            text = text.replace(&expected, &format!("expected {plain}"));
        }
    }
    text
}

/// 1-based line and column of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The dotted key written on the line at `offset`: a table header, or `key = value` under the
/// nearest header above. A best effort for messages; `None` when the line is neither (for
/// example inside a multi-line array).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next().unwrap_or("");
    if let Some(table) = header_name(line) {
        return Some(table);
    }
    let (key, _) = line.split_once('=')?;
    let key = dotted_key(key)?;
    let table = text.get(..line_start)?.lines().rev().find_map(header_name);
    Some(match table {
        Some(table) => format!("{table}.{key}"),
        None => key,
    })
}

/// The name of a `[table]` or `[[array]]` header line.
fn header_name(line: &str) -> Option<String> {
    let line = line.split('#').next().unwrap_or("").trim();
    let inner = line
        .strip_prefix("[[")
        .and_then(|l| l.strip_suffix("]]"))
        .or_else(|| line.strip_prefix('[').and_then(|l| l.strip_suffix(']')))?;
    dotted_key(inner)
}

/// Normalises `a . "b"` to `a.b`; `None` unless every part is a bare or quoted key.
fn dotted_key(raw: &str) -> Option<String> {
    let parts: Option<Vec<&str>> = raw
        .split('.')
        .map(|part| {
            let part = part.trim();
            let unquoted = part
                .strip_prefix('"')
                .and_then(|p| p.strip_suffix('"'))
                .or_else(|| part.strip_prefix('\'').and_then(|p| p.strip_suffix('\'')));
            match unquoted {
                Some(q) if !q.contains(['"', '\'']) => Some(q),
                Some(_) => None,
                None if !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
                {
                    Some(part)
                }
                None => None,
            }
        })
        .collect();
    Some(parts?.join("."))
}

/// What the loader makes of the `PORTCULLIS_*` variables before figment reads them.
#[derive(Default)]
struct EnvOverrides {
    /// `(dotted lowercase key, variable name)` of every override.
    keys: Vec<(String, String)>,
    /// `PORTCULLIS_UPSTREAM__PASSWORD`, verbatim.
    password: Option<String>,
    /// `PORTCULLIS_DELEGATION_TOKENS__SECRET`, verbatim.
    token_secret: Option<String>,
}

impl EnvOverrides {
    /// Sorts the variables under `prefix` (matched case-insensitively, like figment does) into
    /// overrides, the password, and variables that are no configuration keys; refuses names that
    /// look like a key written with one underscore instead of two.
    fn scan(
        prefix: &str,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, ConfigError> {
        let mut found = Self::default();
        for (name, value) in vars {
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = strip_prefix_ignore_case(name, prefix) else {
                continue;
            };
            if !rest.contains(ENV_SEPARATOR) {
                let lower = rest.to_ascii_lowercase();
                if let Some(section) = SECTIONS
                    .iter()
                    .find(|s| lower.strip_prefix(**s).is_some_and(|r| r.starts_with('_')))
                {
                    let key = rest.get(section.len() + 1..).unwrap_or("");
                    return Err(ConfigError::Env {
                        var: name.to_owned(),
                        message: format!(
                            "not a configuration key: levels are separated by `{ENV_SEPARATOR}`, \
                             did you mean {prefix}{}{ENV_SEPARATOR}{}?",
                            section.to_ascii_uppercase(),
                            key
                        ),
                    });
                }
                tracing::debug!(
                    variable = name,
                    "ignoring environment variable: not a configuration key"
                );
                continue;
            }
            let key = rest.replace(ENV_SEPARATOR, ".").to_ascii_lowercase();
            if key.split('.').any(str::is_empty) {
                return Err(ConfigError::Env {
                    var: name.to_owned(),
                    message: "empty key segment".to_owned(),
                });
            }
            if key == PASSWORD_KEY || key == TOKEN_SECRET_KEY {
                let value = value.into_string().map_err(|_| ConfigError::Env {
                    var: name.to_owned(),
                    message: "not valid UTF-8".to_owned(),
                })?;
                if key == PASSWORD_KEY {
                    found.password = Some(value);
                } else {
                    found.token_secret = Some(value);
                }
            }
            found.keys.push((key, name.to_owned()));
        }
        Ok(found)
    }

    /// The variables that set `path` or something under it.
    fn vars_under(&self, path: &str) -> Vec<&str> {
        let mut vars: Vec<&str> = self
            .keys
            .iter()
            .filter(|(key, _)| {
                key == path || path.is_empty() || key.starts_with(&format!("{path}."))
            })
            .map(|(_, var)| var.as_str())
            .collect();
        vars.sort_unstable();
        vars
    }
}

fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| name.get(prefix.len()..))
        .flatten()
}

/// Turns figment's first error into one that names the variable or the key.
fn figment_error(
    path: &Path,
    prefix: &str,
    overrides: &EnvOverrides,
    error: figment::Error,
) -> ConfigError {
    let from_env = error
        .metadata
        .as_ref()
        .is_some_and(|m| m.name.contains("environment"));
    let mut key = error.path.join(".");
    if let figment::error::Kind::MissingField(field) = &error.kind {
        key = if key.is_empty() {
            field.to_string()
        } else {
            format!("{key}.{field}")
        };
    }
    let message = readable(&error.kind.to_string(), Some(&key));
    if from_env {
        let vars = overrides.vars_under(&error.path.join("."));
        let var = if vars.is_empty() {
            format!(
                "{prefix}{}",
                error.path.join(ENV_SEPARATOR).to_ascii_uppercase()
            )
        } else {
            vars.join(", ")
        };
        ConfigError::Env { var, message }
    } else {
        ConfigError::Key {
            path: path.to_owned(),
            key,
            message,
        }
    }
}

pub use tokens_config::{DelegationTokensConfig, TOKEN_SECRET_KEY};

/// `[delegation_tokens]`: Kafka's `delegation.token.*` settings, self-contained with their
/// validation and the rule for a secret kept in the configuration file.
mod tokens_config {
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
}

/// Deserializes the upstream password without ever quoting the value in an error.
mod secret_string {
    use std::fmt;

    use portcullis::secret::Secret;
    use serde::de::{self, Deserializer, Visitor};

    const NOT_A_STRING: &str = "expected a string (the value is not shown: it is a secret)";

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
        d.deserialize_any(SecretVisitor).map(Some)
    }

    struct SecretVisitor;

    impl<'de> Visitor<'de> for SecretVisitor {
        type Value = Secret;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
            Ok(Secret::new(v))
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Secret, E> {
            Err(E::custom(NOT_A_STRING))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secret, E> {
            Err(E::custom(NOT_A_STRING))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secret, E> {
            Err(E::custom(NOT_A_STRING))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secret, E> {
            Err(E::custom(NOT_A_STRING))
        }
        fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Secret, E> {
            Err(E::custom(NOT_A_STRING))
        }
    }
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
        if self.metrics.snapshot_file.is_some() && self.metrics.snapshot_interval_ms == 0 {
            return Err(invalid("metrics.snapshot_interval_ms", "must be positive"));
        }
        self.delegation_tokens.validate()?;
        self.events.validate()?;
        Ok(())
    }
}

impl AuthorizerConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        for user in &self.super_users {
            if portcullis::principal::Principal::parse(user).is_err() {
                return Err(invalid(
                    "authorizer.super_users",
                    format!("`{user}` is not a principal of the form type:name"),
                ));
            }
        }
        Ok(())
    }
}

impl NodeConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.id < 0 {
            return Err(invalid(
                "node.id",
                format!("must be 0 or more, got {}", self.id),
            ));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("node.data_dir", "must not be empty"));
        }
        if self.data_dir.exists() && !self.data_dir.is_dir() {
            return Err(invalid(
                "node.data_dir",
                format!("{} exists and is not a directory", self.data_dir.display()),
            ));
        }
        Ok(())
    }
}

impl PluginsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        // A missing directory means no plugins (docs/plugins.md); a file in its place is a mistake.
        if let Some(dir) = &self.dir {
            if dir.exists() && !dir.is_dir() {
                return Err(invalid(
                    "plugins.dir",
                    format!("{} is not a directory", dir.display()),
                ));
            }
        }
        Ok(())
    }
}

impl ListenerConfig {
    /// The bootstrap address, parsed.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if `address` is not `IP:PORT`.
    pub fn socket_address(&self) -> Result<SocketAddr, ConfigError> {
        self.address.parse().map_err(|_| {
            invalid(
                "listener.address",
                format!(
                    "`{}` is not a socket address (IP:PORT, e.g. 127.0.0.1:9092)",
                    self.address
                ),
            )
        })
    }

    /// The port that serves the upstream broker with `node_id`: `broker_port_base + node_id`, or
    /// `None` if that is not a valid port (a negative id, or past 65535).
    pub fn broker_port(&self, node_id: i32) -> Option<u16> {
        if node_id < 0 {
            return None;
        }
        u16::try_from(i64::from(self.broker_port_base) + i64::from(node_id)).ok()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(invalid("listener.name", "must not be empty"));
        }
        self.socket_address()?;
        if self.advertised_host.trim().is_empty() {
            return Err(invalid("listener.advertised_host", "must not be empty"));
        }
        if self.broker_port_base == 0 {
            return Err(invalid(
                "listener.broker_port_base",
                "must be a port (1-65535); broker N is served at broker_port_base + N",
            ));
        }
        if self.sasl_mechanisms.is_empty() {
            return Err(invalid(
                "listener.sasl_mechanisms",
                "enable at least one mechanism, e.g. [\"SCRAM-SHA-512\"]",
            ));
        }
        for (i, name) in self.sasl_mechanisms.iter().enumerate() {
            if name.trim().is_empty() {
                return Err(invalid("listener.sasl_mechanisms", "empty mechanism name"));
            }
            if self
                .sasl_mechanisms
                .get(..i)
                .is_some_and(|seen| seen.contains(name))
            {
                return Err(invalid(
                    "listener.sasl_mechanisms",
                    format!("`{name}` is listed twice"),
                ));
            }
        }
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        // Frame lengths are i32 on the wire.
        let max_frame = usize::try_from(i32::MAX).unwrap_or(usize::MAX);
        for (key, value) in [
            (
                "listener.max_pre_auth_frame_bytes",
                self.max_pre_auth_frame_bytes,
            ),
            ("listener.max_frame_bytes", self.max_frame_bytes),
        ] {
            if value == 0 || value > max_frame {
                return Err(invalid(
                    key,
                    format!("must be between 1 and {max_frame}, got {value}"),
                ));
            }
        }
        if self.connections_max_reauth_ms < 0 {
            return Err(invalid(
                "listener.connections_max_reauth_ms",
                "must be 0 (disabled) or a positive number of milliseconds",
            ));
        }
        for (mechanism, value) in &self.connections_max_reauth_ms_by_mechanism {
            if !self.sasl_mechanisms.contains(mechanism) {
                return Err(invalid(
                    "listener.connections_max_reauth_ms_by_mechanism",
                    format!("`{mechanism}` is not in listener.sasl_mechanisms"),
                ));
            }
            if *value < 0 {
                return Err(invalid(
                    "listener.connections_max_reauth_ms_by_mechanism",
                    format!(
                        "`{mechanism}` must be 0 (disabled) or a positive number of milliseconds"
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl TlsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        for (key, file) in [
            ("listener.tls.cert_file", Some(&self.cert_file)),
            ("listener.tls.key_file", Some(&self.key_file)),
            ("listener.tls.ca_file", self.ca_file.as_ref()),
        ] {
            if let Some(file) = file {
                if !file.is_file() {
                    return Err(invalid(
                        key,
                        format!("{} is not a readable file", file.display()),
                    ));
                }
            }
        }
        if self.client_auth != ClientAuth::None && self.ca_file.is_none() {
            return Err(invalid(
                "listener.tls.ca_file",
                "required when client_auth is \"requested\" or \"required\"",
            ));
        }
        Ok(())
    }
}

impl UpstreamConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.bootstrap_servers.is_empty() {
            return Err(invalid(
                "upstream.bootstrap_servers",
                "list at least one broker, e.g. [\"127.0.0.1:9092\"]",
            ));
        }
        for server in &self.bootstrap_servers {
            let port_ok = server
                .rsplit_once(':')
                .filter(|(host, _)| !host.trim().is_empty())
                .and_then(|(_, port)| port.parse::<u16>().ok())
                .is_some_and(|port| port != 0);
            if !port_ok {
                return Err(invalid(
                    "upstream.bootstrap_servers",
                    format!("`{server}` is not HOST:PORT"),
                ));
            }
        }
        if self.connect_timeout_ms == 0 {
            return Err(invalid(
                "upstream.connect_timeout_ms",
                "must be more than 0",
            ));
        }
        let protocol = self.security_protocol.name();
        let sasl_only = || {
            format!(
                "only used with security_protocol = \"SASL_PLAINTEXT\" or \"SASL_SSL\" (it is \
                 {protocol}); remove it or set the protocol"
            )
        };
        if let Some(login) = &self.login {
            if login.plugin.trim().is_empty() {
                return Err(invalid("upstream.login.plugin", "must not be empty"));
            }
            if !self.security_protocol.uses_sasl() {
                return Err(invalid("upstream.login.plugin", sasl_only()));
            }
        }
        // A login plugin other than the built-in password login brings its own settings.
        let own_login = self.login.as_ref().is_some_and(|l| !l.is_password_login());
        if self.security_protocol.uses_sasl() && !own_login {
            let Some(mechanism) = &self.sasl_mechanism else {
                return Err(invalid(
                    "upstream.sasl_mechanism",
                    format!("required when security_protocol is {protocol}"),
                ));
            };
            if !UPSTREAM_SASL_MECHANISMS.contains(&mechanism.as_str()) {
                return Err(invalid(
                    "upstream.sasl_mechanism",
                    format!(
                        "`{mechanism}` is not supported upstream; use one of {}",
                        UPSTREAM_SASL_MECHANISMS.join(", ")
                    ),
                ));
            }
            if self.username.as_deref().is_none_or(str::is_empty) {
                return Err(invalid(
                    "upstream.username",
                    format!("required when security_protocol is {protocol}"),
                ));
            }
            if self.password.is_none() {
                return Err(invalid(
                    "upstream.password",
                    format!(
                        "required when security_protocol is {protocol} \
                         (or set PORTCULLIS_UPSTREAM__PASSWORD)"
                    ),
                ));
            }
        } else if !self.security_protocol.uses_sasl() {
            for (key, set) in [
                ("upstream.sasl_mechanism", self.sasl_mechanism.is_some()),
                ("upstream.username", self.username.is_some()),
                ("upstream.password", self.password.is_some()),
            ] {
                if set {
                    return Err(invalid(key, sasl_only()));
                }
            }
        }
        match (&self.tls, self.security_protocol.uses_tls()) {
            (Some(_), false) => Err(invalid(
                "upstream.tls",
                format!(
                    "only used with security_protocol = \"SSL\" or \"SASL_SSL\" (it is \
                     {protocol}); remove it or set the protocol"
                ),
            )),
            (Some(tls), true) => tls.validate(),
            (None, _) => Ok(()),
        }
    }
}

impl UpstreamTlsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        for (key, file) in [
            ("upstream.tls.ca_file", self.ca_file.as_ref()),
            ("upstream.tls.cert_file", self.cert_file.as_ref()),
            ("upstream.tls.key_file", self.key_file.as_ref()),
        ] {
            if let Some(file) = file {
                if !file.is_file() {
                    return Err(invalid(
                        key,
                        format!("{} is not a readable file", file.display()),
                    ));
                }
            }
        }
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err(invalid(
                "upstream.tls.key_file",
                "required with cert_file (the certificate's private key)",
            )),
            (None, Some(_)) => Err(invalid(
                "upstream.tls.cert_file",
                "required with key_file (the certificate the key belongs to)",
            )),
            _ => Ok(()),
        }
    }
}

impl LimitsConfig {
    fn validate(&self, base_failure_delay_ms: u64) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(invalid("limits.max_connections", "must be at least 1"));
        }
        if self.max_connections_per_ip == Some(0) {
            return Err(invalid(
                "limits.max_connections_per_ip",
                "must be at least 1 (leave it out for no limit)",
            ));
        }
        for (key, value) in [
            (
                "limits.connections_max_idle_ms",
                self.connections_max_idle_ms,
            ),
            (
                "limits.authentication_timeout_ms",
                self.authentication_timeout_ms,
            ),
            (
                "limits.failed_authentication.half_life_ms",
                self.failed_authentication.half_life_ms,
            ),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be more than 0"));
            }
        }
        if self.failed_authentication.max_delay_ms < base_failure_delay_ms {
            return Err(invalid(
                "limits.failed_authentication.max_delay_ms",
                format!(
                    "must be at least listener.failed_authentication_delay_ms \
                     ({base_failure_delay_ms})"
                ),
            ));
        }
        Ok(())
    }
}

impl ForwardingConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.policy.trim().is_empty() {
            return Err(invalid("forwarding.policy", "must not be empty"));
        }
        for key in &self.deny_api_keys {
            if kafka_protocol::messages::ApiKey::try_from(*key).is_err() {
                return Err(invalid(
                    "forwarding.deny_api_keys",
                    format!("{key} is not a known Kafka API key"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const GOOD: &str = r#"[node]
id = 1
data_dir = "data"

[listener]
address = "127.0.0.1:9092"
advertised_host = "localhost"
broker_port_base = 9100
sasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]

[upstream]
bootstrap_servers = ["127.0.0.1:19092"]
"#;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    /// Each test that touches the environment uses its own prefix, so tests running in parallel
    /// never see each other's variables.
    fn load_env(text: &str, prefix: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        for (k, v) in vars {
            std::env::set_var(format!("{prefix}{k}"), v);
        }
        let f = file(text);
        let result = load_with_env_prefix(f.path(), prefix);
        for (k, _) in vars {
            std::env::remove_var(format!("{prefix}{k}"));
        }
        result
    }

    fn parse(text: &str) -> Config {
        toml::from_str(text).unwrap()
    }

    fn invalid_key(config: &Config) -> String {
        match config.validate() {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn loads_a_good_file_with_defaults() {
        let config = load_env(GOOD, "PCT_GOOD_", &[]).unwrap();
        assert_eq!(config.node.id, 1);
        assert_eq!(config.listener.name, "external");
        assert_eq!(config.listener.sasl_mechanisms, ["SCRAM-SHA-512", "PLAIN"]);
        assert_eq!(
            config.upstream.security_protocol,
            SecurityProtocol::Plaintext
        );
        assert_eq!(config.forwarding.policy, "passthrough");
        assert_eq!(config.listener.failed_authentication_delay_ms, 100);
        assert_eq!(config.upstream.connect_timeout_ms, 10_000);
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = load(Path::new("/nonexistent/portcullis.toml")).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert!(
            err.to_string().contains("/nonexistent/portcullis.toml"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_key_is_reported_with_its_line_and_key() {
        let text = GOOD.replace(
            "broker_port_base = 9100",
            "broker_port_base = 9100\nbogus = 1",
        );
        let err = load_env(&text, "PCT_UNKNOWN_", &[]).unwrap_err();
        match &err {
            ConfigError::File {
                line,
                column,
                key,
                message,
                ..
            } => {
                assert_eq!((*line, *column), (9, 1));
                assert_eq!(key.as_deref(), Some("listener.bogus"));
                assert!(message.contains("unknown field `bogus`"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            err.to_string()
                .contains("line 9, column 1 (`listener.bogus`)"),
            "{err}"
        );
    }

    #[test]
    fn a_wrong_type_is_reported_with_its_line() {
        let text = GOOD.replace("broker_port_base = 9100", "broker_port_base = 70000");
        let err = load_env(&text, "PCT_TYPE_", &[]).unwrap_err();
        match err {
            ConfigError::File {
                line, key, message, ..
            } => {
                assert_eq!(line, 8);
                assert_eq!(key.as_deref(), Some("listener.broker_port_base"));
                assert!(message.contains("expected a port (1–65535)"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_syntax_error_is_reported_with_its_line() {
        let text = GOOD.replace("[upstream]", "[upstream");
        let err = load_env(&text, "PCT_SYNTAX_", &[]).unwrap_err();
        assert!(matches!(err, ConfigError::File { line: 11, .. }), "{err:?}");
    }

    #[test]
    fn env_overrides_any_key() {
        let config = load_env(
            GOOD,
            "PCT_OVERRIDE_",
            &[
                ("LISTENER__ADDRESS", "127.0.0.1:9300"),
                (
                    "UPSTREAM__BOOTSTRAP_SERVERS",
                    "[127.0.0.1:9092, 127.0.0.1:9093]",
                ),
                ("FORWARDING__DENY_API_KEYS", "[20]"),
                ("CACHE", "/not/a/config/key"),
            ],
        )
        .unwrap();
        assert_eq!(config.listener.address, "127.0.0.1:9300");
        assert_eq!(
            config.upstream.bootstrap_servers,
            ["127.0.0.1:9092", "127.0.0.1:9093"]
        );
        assert_eq!(config.forwarding.deny_api_keys, [20]);
    }

    #[test]
    fn env_can_supply_a_key_the_file_lacks() {
        let text = GOOD.replace("address = \"127.0.0.1:9092\"\n", "");
        let config = load_env(
            &text,
            "PCT_SUPPLY_",
            &[("LISTENER__ADDRESS", "127.0.0.1:9301")],
        )
        .unwrap();
        assert_eq!(config.listener.address, "127.0.0.1:9301");
        let err = load_env(&text, "PCT_SUPPLY2_", &[]).unwrap_err();
        match err {
            ConfigError::Key { key, .. } => assert_eq!(key, "listener.address"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_env_key_is_rejected_by_name() {
        let err = load_env(GOOD, "PCT_ENVUNK_", &[("LISTENER__BOGUS", "1")]).unwrap_err();
        match &err {
            ConfigError::Env { var, message } => {
                assert_eq!(var, "PCT_ENVUNK_LISTENER__BOGUS");
                assert!(message.contains("unknown field"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let err = load_env(GOOD, "PCT_ENVUNK2_", &[("NOPE__X", "1")]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Env { var, .. } if var == "PCT_ENVUNK2_NOPE__X"),
            "{err:?}"
        );
    }

    #[test]
    fn a_single_underscore_env_key_gets_a_hint() {
        let err = load_env(GOOD, "PCT_ENVHINT_", &[("LISTENER_ADDRESS", "x")]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("did you mean PCT_ENVHINT_LISTENER__ADDRESS"),
            "{text}"
        );
    }

    #[test]
    fn a_bad_env_value_names_the_variable() {
        let err = load_env(
            GOOD,
            "PCT_ENVBAD_",
            &[("LISTENER__BROKER_PORT_BASE", "nine")],
        )
        .unwrap_err();
        match err {
            ConfigError::Env { var, message } => {
                assert_eq!(var, "PCT_ENVBAD_LISTENER__BROKER_PORT_BASE");
                assert!(message.contains("expected a port (1–65535)"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn type_errors_name_the_expected_value_in_words() {
        let err = load_env(GOOD, "PCT_WORDS1_", &[("NODE__ID", "x")]).unwrap_err();
        assert!(err.to_string().ends_with("expected an integer"), "{err}");
        let err = load_env(GOOD, "PCT_WORDS2_", &[("LIMITS__MAX_CONNECTIONS", "-1")]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("invalid value `-1`"), "{text}");
        assert!(
            text.ends_with("expected a whole number (0 or more)"),
            "{text}"
        );
        let err = load_env(GOOD, "PCT_WORDS3_", &[("LISTENER__BOGUS", "1")]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("expected one of `name`, `address`,") && !text.contains("``"),
            "{text}"
        );
        assert!(text.ends_with('`') && !text.contains("`one of"), "{text}");
    }

    #[test]
    fn the_env_password_is_taken_verbatim_and_never_shown() {
        let text = format!(
            "{GOOD}security_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nusername = \"svc\"\n"
        );
        let config = load_env(&text, "PCT_PASS_", &[("UPSTREAM__PASSWORD", "0123")]).unwrap();
        assert_eq!(
            config.upstream.password.as_ref().map(Secret::expose),
            Some("0123")
        );
        assert!(!format!("{config:?}").contains("0123"));
    }

    #[test]
    fn a_password_of_the_wrong_type_is_not_quoted() {
        let text = format!("{GOOD}password = 987654\n");
        let err = load_env(&text, "PCT_PASSTYPE_", &[]).unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("upstream.password"), "{shown}");
        assert!(!shown.contains("987654"), "{shown}");
    }

    #[test]
    fn validation_requires_a_mechanism() {
        let mut c = parse(GOOD);
        c.listener.sasl_mechanisms.clear();
        assert_eq!(invalid_key(&c), "listener.sasl_mechanisms");
        c.listener.sasl_mechanisms = vec!["PLAIN".into(), "PLAIN".into()];
        assert_eq!(invalid_key(&c), "listener.sasl_mechanisms");
    }

    #[test]
    fn validation_requires_a_socket_address() {
        let mut c = parse(GOOD);
        c.listener.address = "localhost".into();
        assert_eq!(invalid_key(&c), "listener.address");
    }

    #[test]
    fn validation_checks_tls_files_and_ca() {
        let cert = file("cert");
        let mut c = parse(GOOD);
        c.listener.tls = Some(TlsConfig {
            cert_file: cert.path().to_owned(),
            key_file: "/nonexistent/key.pem".into(),
            client_auth: ClientAuth::None,
            ca_file: None,
        });
        assert_eq!(invalid_key(&c), "listener.tls.key_file");
        if let Some(tls) = c.listener.tls.as_mut() {
            tls.key_file = cert.path().to_owned();
            tls.client_auth = ClientAuth::Required;
        }
        assert_eq!(invalid_key(&c), "listener.tls.ca_file");
        if let Some(tls) = c.listener.tls.as_mut() {
            tls.ca_file = Some(cert.path().to_owned());
        }
        c.validate().unwrap();
    }

    #[test]
    fn validation_of_sasl_plaintext_upstream() {
        let mut c = parse(GOOD);
        c.upstream.security_protocol = SecurityProtocol::SaslPlaintext;
        assert_eq!(invalid_key(&c), "upstream.sasl_mechanism");
        c.upstream.sasl_mechanism = Some("GSSAPI".into());
        assert_eq!(invalid_key(&c), "upstream.sasl_mechanism");
        c.upstream.sasl_mechanism = Some("SCRAM-SHA-256".into());
        assert_eq!(invalid_key(&c), "upstream.username");
        c.upstream.username = Some("svc".into());
        assert_eq!(invalid_key(&c), "upstream.password");
        c.upstream.password = Some(Secret::new("hunter2"));
        c.validate().unwrap();
        c.upstream.security_protocol = SecurityProtocol::Plaintext;
        let err = c.validate().unwrap_err();
        assert!(!format!("{err} {err:?}").contains("hunter2"));
    }

    #[test]
    fn validation_of_bootstrap_servers() {
        let mut c = parse(GOOD);
        c.upstream.bootstrap_servers.clear();
        assert_eq!(invalid_key(&c), "upstream.bootstrap_servers");
        c.upstream.bootstrap_servers = vec!["127.0.0.1".into()];
        assert_eq!(invalid_key(&c), "upstream.bootstrap_servers");
        c.upstream.bootstrap_servers = vec!["[::1]:9092".into()];
        c.validate().unwrap();
    }

    #[test]
    fn validation_of_deny_api_keys() {
        let mut c = parse(GOOD);
        c.forwarding.deny_api_keys = vec![20, 999];
        assert_eq!(invalid_key(&c), "forwarding.deny_api_keys");
        c.forwarding.deny_api_keys = vec![20];
        c.validate().unwrap();
    }

    #[test]
    fn broker_ports_must_fit_u16() {
        let mut c = parse(GOOD);
        assert_eq!(c.listener.broker_port(3), Some(9103));
        assert_eq!(c.listener.broker_port(-1), None);
        c.listener.broker_port_base = 65_530;
        assert_eq!(c.listener.broker_port(5), Some(65_535));
        assert_eq!(c.listener.broker_port(6), None);
        c.listener.broker_port_base = 0;
        assert_eq!(invalid_key(&c), "listener.broker_port_base");
    }

    #[test]
    fn keys_are_found_in_headers_and_dotted_tables() {
        let text = "[listener.tls]\ncert_file = 1\n";
        assert_eq!(key_at(text, 15).as_deref(), Some("listener.tls.cert_file"));
        assert_eq!(key_at(text, 0).as_deref(), Some("listener.tls"));
        assert_eq!(key_at("a = [\n  \"x=y\",\n]\n", 8), None);
    }

    #[cfg(unix)]
    fn with_mode(text: &str, mode: u32) -> tempfile::NamedTempFile {
        use std::os::unix::fs::PermissionsExt;
        let f = file(text);
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

    #[test]
    fn tokens_are_disabled_without_a_secret() {
        let config = load_env(GOOD, "PCT_TOK_OFF_", &[]).unwrap();
        assert!(!config.delegation_tokens.enabled());
        assert_eq!(config.delegation_tokens.max_lifetime_ms, 604_800_000);
        assert_eq!(config.delegation_tokens.expiry_time_ms, 86_400_000);
        assert_eq!(config.delegation_tokens.expiry_check_interval_ms, 3_600_000);
    }

    #[cfg(unix)]
    #[test]
    fn a_secret_in_a_file_others_can_read_is_refused_and_never_shown() {
        let text = format!("{GOOD}\n[delegation_tokens]\nsecret = \"hunter2-token-key\"\n");
        let f = with_mode(&text, 0o644);
        let err = load_with_env_prefix(f.path(), "PCT_TOK_PERM_")
            .unwrap_err()
            .to_string();
        assert!(err.contains("chmod 600"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let f = with_mode(&text, 0o600);
        let config = load_with_env_prefix(f.path(), "PCT_TOK_PERM_").unwrap();
        assert!(config.delegation_tokens.enabled());
        assert!(!format!("{config:?}").contains("hunter2"));
        // Group-readable: accepted with a warning.
        let f = with_mode(&text, 0o640);
        assert!(load_with_env_prefix(f.path(), "PCT_TOK_PERM_").is_ok());
    }

    #[test]
    fn the_env_secret_is_taken_verbatim_and_needs_no_private_file() {
        let config = load_env(
            GOOD,
            "PCT_TOK_ENV_",
            &[
                ("DELEGATION_TOKENS__SECRET", "1234"),
                ("DELEGATION_TOKENS__EXPIRY_TIME_MS", "5000"),
            ],
        )
        .unwrap();
        assert_eq!(
            config.delegation_tokens.secret.as_ref().map(|s| s.expose()),
            Some("1234")
        );
        assert_eq!(config.delegation_tokens.expiry_time_ms, 5000);
        let err = load_env(GOOD, "PCT_TOK_ENV2_", &[("DELEGATION_TOKENS_SECRET", "x")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("PCT_TOK_ENV2_DELEGATION_TOKENS__SECRET"),
            "{err}"
        );
    }

    #[test]
    fn token_settings_are_validated() {
        let mut config = parse(GOOD);
        config.delegation_tokens.expiry_time_ms = 0;
        assert_eq!(invalid_key(&config), "delegation_tokens.expiry_time_ms");
        let mut config = parse(GOOD);
        config.delegation_tokens.accept_token_without_extension = true;
        assert_eq!(
            invalid_key(&config),
            "delegation_tokens.accept_token_without_extension"
        );
        config.delegation_tokens.secret = Some(Secret::new(""));
        assert!(!config.delegation_tokens.enabled());
    }
}
