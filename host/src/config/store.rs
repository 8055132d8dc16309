//! `[store]` and `[cluster]`: where the metadata log lives, and the node's cluster.

use super::*;

/// `[store]`: where the security metadata log lives.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `file` (default): the node's own log in `node.data_dir`. `kafka`: a compacted topic of the
    /// upstream cluster, shared by every node with the same `cluster_id`.
    #[serde(default)]
    pub kind: StoreKind,
    /// The log's topic (`kafka`), created if absent.
    #[serde(default = "default_store_topic")]
    pub topic: String,
    /// Nodes with the same id share the log and elect one writer (`kafka`; required).
    pub cluster_id: Option<String>,
    /// How long a writer that stops heartbeating keeps its role before another node is elected
    /// (the election group's `session.timeout.ms`; Kafka accepts 6000 to 300000 by default).
    #[serde(default = "default_store_session_timeout_ms")]
    pub session_timeout_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::File,
            topic: default_store_topic(),
            cluster_id: None,
            session_timeout_ms: default_store_session_timeout_ms(),
        }
    }
}

/// `[store] kind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// The node's own file log.
    #[default]
    File,
    /// A compacted topic of the upstream cluster.
    Kafka,
}

fn default_store_topic() -> String {
    "__portcullis_metadata".to_owned()
}
fn default_store_session_timeout_ms() -> u64 {
    6_000
}

/// `[cluster]`: how the nodes of a cluster reach each other. A node that is not the writer sends
/// each security mutation to the writer's inter-node listener in an Envelope (KIP-590); both ends
/// prove who they are with certificates from `ca_file` (mutual TLS, required).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The inter-node listener, `IP:PORT`.
    pub listener: String,
    /// How peers reach this node's inter-node listener, `HOST:PORT` (default: `listener`).
    pub advertised_address: Option<String>,
    /// PEM certificate chain of this node: served on the inter-node listener and presented to the
    /// writer when forwarding. The writer's principal builder names the node from it (the
    /// default builder: `User:` + the subject's RFC 2253 DN); that principal needs
    /// `ClusterAction` on `Cluster`.
    pub cert_file: PathBuf,
    /// PEM private key of `cert_file`.
    pub key_file: PathBuf,
    /// PEM CA bundle the peers' certificates must chain to.
    pub ca_file: PathBuf,
    /// How long a forwarded mutation may wait for a writer (Kafka clients' `request.timeout.ms`
    /// is 30 s by default); then the client gets REQUEST_TIMED_OUT.
    #[serde(default = "default_forward_timeout_ms")]
    pub forward_timeout_ms: u64,
}

fn default_forward_timeout_ms() -> u64 {
    30_000
}

impl ClusterConfig {
    /// The inter-node listener's address, parsed.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if `listener` is not `IP:PORT`.
    pub fn socket_address(&self) -> Result<SocketAddr, ConfigError> {
        self.listener.parse().map_err(|_| {
            invalid(
                "cluster.listener",
                format!("`{}` is not a socket address (IP:PORT)", self.listener),
            )
        })
    }

    /// Where peers reach this node.
    pub fn advertised(&self) -> &str {
        self.advertised_address.as_deref().unwrap_or(&self.listener)
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.socket_address()?;
        if let Some(advertised) = &self.advertised_address {
            let ok = advertised.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !ok {
                return Err(invalid(
                    "cluster.advertised_address",
                    format!("`{advertised}` is not HOST:PORT"),
                ));
            }
        }
        for (key, file) in [
            ("cluster.cert_file", &self.cert_file),
            ("cluster.key_file", &self.key_file),
            ("cluster.ca_file", &self.ca_file),
        ] {
            if !file.is_file() {
                return Err(invalid(key, format!("{} is not a file", file.display())));
            }
        }
        if self.forward_timeout_ms == 0 {
            return Err(invalid("cluster.forward_timeout_ms", "must be more than 0"));
        }
        Ok(())
    }
}

impl StoreConfig {
    pub(crate) fn validate(
        &self,
        cluster: Option<&ClusterConfig>,
        upstream: &UpstreamConfig,
    ) -> Result<(), ConfigError> {
        match self.kind {
            StoreKind::File => {
                if cluster.is_some() {
                    return Err(invalid(
                        "cluster",
                        "a cluster of nodes shares its metadata through the upstream: set \
                         [store] kind = \"kafka\" (and cluster_id), or remove [cluster]",
                    ));
                }
                Ok(())
            }
            StoreKind::Kafka => {
                let id = self.cluster_id.as_deref().unwrap_or_default();
                let id_ok = !id.is_empty()
                    && id.len() <= 200
                    && id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
                if !id_ok {
                    return Err(invalid(
                        "store.cluster_id",
                        "kind = \"kafka\" needs a cluster id of letters, digits, `.`, `_`, `-` \
                         (nodes with the same id share their state)",
                    ));
                }
                let topic_ok = !self.topic.is_empty()
                    && self.topic.len() <= 200
                    && self
                        .topic
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
                if !topic_ok {
                    return Err(invalid(
                        "store.topic",
                        format!("`{}` is not a Kafka topic name", self.topic),
                    ));
                }
                if !(1_000..=3_600_000).contains(&self.session_timeout_ms) {
                    return Err(invalid(
                        "store.session_timeout_ms",
                        "must be between 1000 and 3600000",
                    ));
                }
                // The store's clients (librdkafka) log in with the upstream password only; a
                // login module's credential (a token, a file it reads) cannot reach them.
                if let Some(login) = upstream.login.as_ref().filter(|l| !l.is_password_login()) {
                    return Err(invalid(
                        "upstream.login.plugin",
                        format!(
                            "the kafka store logs in to the upstream with [upstream]'s username \
                             and password; the login plugin `{}` cannot be used with \
                             [store] kind = \"kafka\"",
                            login.plugin
                        ),
                    ));
                }
                if let Some(mechanism) = &upstream.sasl_mechanism {
                    if upstream.security_protocol.uses_sasl()
                        && !portcullis_plugin_kafka_store::SUPPORTED_MECHANISMS
                            .contains(&mechanism.as_str())
                    {
                        return Err(invalid(
                            "upstream.sasl_mechanism",
                            format!(
                                "the kafka store logs in to the upstream with {}, not {mechanism}",
                                portcullis_plugin_kafka_store::SUPPORTED_MECHANISMS.join(", ")
                            ),
                        ));
                    }
                }
                match cluster {
                    Some(cluster) => cluster.validate(),
                    None => Err(invalid(
                        "cluster",
                        "kind = \"kafka\" needs [cluster] (listener, cert_file, key_file, \
                         ca_file): nodes that are not the writer forward mutations to it",
                    )),
                }
            }
        }
    }
}
