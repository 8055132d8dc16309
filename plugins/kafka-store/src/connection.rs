//! How the store's Kafka clients reach the upstream cluster: the node's `[upstream]` settings
//! (bootstrap servers, security protocol, SASL, TLS) as librdkafka configuration.

use std::path::PathBuf;

use rdkafka::ClientConfig;

/// SASL credentials of the upstream login (`SASL_PLAINTEXT` / `SASL_SSL`).
#[derive(Clone)]
pub struct SaslSettings {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (what librdkafka can do with a password).
    pub mechanism: String,
    /// The user.
    pub username: String,
    /// The password; never logged.
    pub password: String,
}

impl std::fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// TLS to the brokers (`SSL` / `SASL_SSL`).
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// PEM CA bundle; `None`: OpenSSL's default trust store.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (mutual TLS).
    pub cert_file: Option<PathBuf>,
    /// PEM key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Check the broker certificate's name against the host connected to.
    pub verify_server_name: bool,
}

/// Where the upstream cluster is and how to log in to it.
#[derive(Clone, Debug)]
pub struct KafkaConnection {
    /// `host:port` of bootstrap brokers.
    pub bootstrap_servers: Vec<String>,
    /// `PLAINTEXT`, `SASL_PLAINTEXT`, `SSL` or `SASL_SSL`.
    pub security_protocol: String,
    /// SASL, for the `SASL_*` protocols.
    pub sasl: Option<SaslSettings>,
    /// TLS, for `SSL` / `SASL_SSL`.
    pub tls: Option<TlsSettings>,
}

/// The SASL mechanisms librdkafka can log in with from a user and password.
pub const SUPPORTED_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

impl KafkaConnection {
    /// Checks what librdkafka cannot do before any client is made.
    ///
    /// # Errors
    /// A SASL mechanism librdkafka cannot log in with from a password.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(sasl) = &self.sasl {
            if !SUPPORTED_MECHANISMS.contains(&sasl.mechanism.as_str()) {
                return Err(format!(
                    "the kafka store logs in to the upstream with {}; it cannot with {}",
                    SUPPORTED_MECHANISMS.join(", "),
                    sasl.mechanism
                ));
            }
        }
        Ok(())
    }

    /// A librdkafka configuration with these connection settings and `client_id`.
    pub(crate) fn client_config(&self, client_id: &str) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.bootstrap_servers.join(","))
            .set("security.protocol", &self.security_protocol)
            .set("client.id", client_id)
            // librdkafka's own log lines go through the `log` facade, which nothing collects; the
            // store reports what matters itself.
            .set("log_level", "3");
        if let Some(sasl) = &self.sasl {
            config
                .set("sasl.mechanism", &sasl.mechanism)
                .set("sasl.username", &sasl.username)
                .set("sasl.password", &sasl.password);
        }
        if let Some(tls) = &self.tls {
            if let Some(ca) = &tls.ca_file {
                config.set("ssl.ca.location", ca.display().to_string());
            }
            if let Some(cert) = &tls.cert_file {
                config.set("ssl.certificate.location", cert.display().to_string());
            }
            if let Some(key) = &tls.key_file {
                config.set("ssl.key.location", key.display().to_string());
            }
            config.set(
                "ssl.endpoint.identification.algorithm",
                if tls.verify_server_name {
                    "https"
                } else {
                    "none"
                },
            );
        }
        config
    }
}
