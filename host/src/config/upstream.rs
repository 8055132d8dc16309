//! `[upstream]` (with its TLS) and `[forwarding]`.

use super::*;

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
    /// Timeout for connecting and authenticating upstream, and for each of Portcullis' own
    /// requests there (re-authentication, delegated token operations).
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
    /// `[forwarding.delegated]`: the upstream delegation tokens' settings (see
    /// `delegated_config.rs`). The `delegated` policy uses them (its defaults when the table is
    /// absent); for any other policy the table's presence is what lets a plugin policy route
    /// requests with the client's own identity.
    #[serde(default)]
    pub delegated: Option<crate::delegated_config::DelegatedConfig>,
}

/// `[forwarding.delegated]`'s defaults, for the `delegated` policy without the table.
static DEFAULT_DELEGATED: std::sync::LazyLock<crate::delegated_config::DelegatedSettings> =
    std::sync::LazyLock::new(Default::default);

impl ForwardingConfig {
    /// The upstream delegation tokens' settings, when the node may connect upstream as its
    /// clients: with the `delegated` policy (the table or its defaults), or with any other policy
    /// when `[forwarding.delegated]` is present (a plugin policy may then choose
    /// `UpstreamIdentity::Delegated`). `None`: every request goes upstream as the service.
    pub fn delegated_settings(&self) -> Option<&crate::delegated_config::DelegatedSettings> {
        match &self.delegated {
            Some(table) => Some(&table.0),
            None if self.policy == "delegated" => Some(&DEFAULT_DELEGATED),
            None => None,
        }
    }

    /// `authorizer = "upstream"` under the `delegated` policy: upstream-bound requests are
    /// allowed locally and the upstream decides, as the client's principal.
    pub fn upstream_authorizes(&self) -> bool {
        self.delegated_settings()
            .is_some_and(|s| s.authorizer == crate::delegated_config::AuthorizerMode::Upstream)
    }
}

impl Default for ForwardingConfig {
    fn default() -> Self {
        Self {
            policy: default_policy(),
            deny_api_keys: Vec::new(),
            delegated: None,
        }
    }
}

fn default_upstream_timeout_ms() -> u64 {
    10_000
}
fn default_policy() -> String {
    "passthrough".to_owned()
}

impl UpstreamConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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
            if mechanism == "OAUTHBEARER" {
                return Err(invalid(
                    "upstream.sasl_mechanism",
                    "OAUTHBEARER logs in with a token, not a password: set [upstream.login] \
                     plugin = \"oauth-client-credentials\" (or \"oauth-jwt-bearer\") and its \
                     [plugins.config.<NAME>] table",
                ));
            }
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
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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

impl ForwardingConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.policy.trim().is_empty() {
            return Err(invalid("forwarding.policy", "must not be empty"));
        }
        if let Some(table) = &self.delegated {
            table.validate()?;
            if self.policy != "delegated"
                && table.0.authorizer == crate::delegated_config::AuthorizerMode::Upstream
            {
                // Another policy may route a request as the service identity, which the upstream
                // would then authorize as Portcullis: never skip the local authorizer for it.
                return Err(invalid(
                    "forwarding.delegated.authorizer",
                    "\"upstream\" needs forwarding.policy = \"delegated\" (another policy may send \
                     requests upstream as Portcullis' own identity, which only the local authorizer checks)",
                ));
            }
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
