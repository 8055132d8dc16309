//! How the store's Kafka clients reach the upstream cluster: the node's `[upstream]` settings
//! (bootstrap servers, security protocol, SASL, TLS) as librdkafka configuration.

use std::path::PathBuf;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, ClientContext};

/// Where librdkafka's own log lines and client errors go: the store's own threads report what
/// matters (the writer's changes, a log that cannot be read), and librdkafka's reconnection
/// errors while the cluster is unreachable would flood the log at `warn`; so they go to `debug`,
/// and only what librdkafka calls critical or fatal is shown at `warn`/`error`.
pub(crate) fn log_client_line(level: RDKafkaLogLevel, facility: &str, line: &str) {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
            tracing::warn!(facility, "librdkafka: {line}")
        }
        _ => tracing::debug!(facility, "librdkafka: {line}"),
    }
}

/// See [`log_client_line`]; the end of the partition is not an error for a reader.
pub(crate) fn log_client_error(error: &KafkaError, reason: &str) {
    match error {
        KafkaError::PartitionEOF(_) => {}
        e if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::Fatal) => {
            tracing::error!(error = %e, reason, "librdkafka: fatal error")
        }
        e => tracing::debug!(error = %e, reason, "librdkafka"),
    }
}

/// `error` as text without the value of a refused configuration property: rdkafka's own text of
/// a `ClientConfig` error shows the value, which for `sasl.password` is a secret.
pub(crate) fn client_error_text(error: &KafkaError) -> String {
    match error {
        KafkaError::ClientConfig(_, description, key, _) => {
            format!("client configuration refused: {key}: {description}")
        }
        other => other.to_string(),
    }
}

/// The context of the store's consumers and plain producers.
pub(crate) struct StoreContext;

impl ClientContext for StoreContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        log_client_line(level, facility, line);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

impl ConsumerContext for StoreContext {}

impl rdkafka::producer::ProducerContext for StoreContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, (): Self::DeliveryOpaque) {}
}

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

/// A SASL mechanism librdkafka cannot log in with from a user and password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the kafka store logs in to the upstream with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; it cannot with {mechanism}")]
pub struct UnsupportedMechanism {
    /// The mechanism configured.
    pub mechanism: String,
}

impl KafkaConnection {
    /// Checks what librdkafka cannot do before any client is made.
    ///
    /// # Errors
    /// A SASL mechanism librdkafka cannot log in with from a password.
    pub fn validate(&self) -> Result<(), UnsupportedMechanism> {
        if let Some(sasl) = &self.sasl {
            if !SUPPORTED_MECHANISMS.contains(&sasl.mechanism.as_str()) {
                return Err(UnsupportedMechanism {
                    mechanism: sasl.mechanism.clone(),
                });
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
            // librdkafka's own log lines go to the contexts above (warnings and up).
            .set("log_level", "4");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_configuration_value_is_never_shown() {
        let error = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value".into(),
            "sasl.password".into(),
            "s3cret-value".into(),
        );
        assert!(
            error.to_string().contains("s3cret-value"),
            "rdkafka's own text shows it"
        );
        let text = client_error_text(&error);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            text.contains("sasl.password") && text.contains("Invalid value"),
            "{text}"
        );
    }
}
