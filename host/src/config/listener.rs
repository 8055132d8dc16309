//! `[listener]` and its TLS.

use super::*;

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

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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
