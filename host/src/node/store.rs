//! The node's metadata store: the file log in the data directory or the cluster's shared topic.

use std::fmt;
use std::sync::Arc;

use portcullis::registry::{self, StoreSettings};
use portcullis::store::{MetadataStore, StoreError};
use portcullis_plugin_kafka_store::{
    KafkaConnection, KafkaMetadataStore, KafkaStoreSettings, SaslSettings, TlsSettings,
};

use super::error::NodeError;
use crate::config::{Config, StoreKind};

/// Where the node's metadata log is (`[store] kind`).
#[derive(Clone)]
pub enum NodeStore {
    /// The node's own log: the built-in `file` store in the data directory.
    File(Arc<dyn MetadataStore>),
    /// A compacted topic of the upstream cluster, shared with the other nodes of the cluster.
    Kafka(Arc<KafkaMetadataStore>),
}

impl fmt::Debug for NodeStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeStore::File(store) => write!(f, "File({})", store.location()),
            NodeStore::Kafka(store) => write!(f, "Kafka({})", store.location()),
        }
    }
}

impl NodeStore {
    /// The store behind the `MetadataStore` trait.
    pub fn shared(&self) -> Arc<dyn MetadataStore> {
        match self {
            NodeStore::File(store) => Arc::clone(store),
            NodeStore::Kafka(store) => Arc::clone(store) as Arc<dyn MetadataStore>,
        }
    }

    /// Stops following a shared log and leaves the election at once (a successor need not wait
    /// for the session timeout); nothing to do for the file store.
    pub fn shutdown(&self) {
        if let NodeStore::Kafka(store) = self {
            store.shutdown();
        }
    }
}

/// Opens the configured store: the built-in `file` store in `node.data_dir`, or the cluster's
/// topic (replayed before this returns).
///
/// The kafka store is not chosen through the store registry: it is opened with the node's
/// `[upstream]` connection, `[store]` and `[cluster]` settings, which the registry's
/// `StoreSettings` (a data directory) do not carry.
///
/// # Errors
/// The store cannot be opened.
pub fn open_store(config: &Config) -> Result<NodeStore, NodeError> {
    match config.store.kind {
        StoreKind::File => {
            let name = registry::DEFAULT_STORE;
            let factory = registry::stores()
                .find(|f| f.name == name)
                .ok_or_else(|| NodeError::UnknownStore(name.to_owned()))?;
            let store = (factory.open)(&StoreSettings::new(&config.node.data_dir))
                .map_err(NodeError::Store)?;
            Ok(NodeStore::File(store))
        }
        StoreKind::Kafka => Ok(NodeStore::Kafka(Arc::new(
            KafkaMetadataStore::open(kafka_store_settings(config, true)?)
                .map_err(NodeError::Store)?,
        ))),
    }
}

/// How the kafka store's clients log in upstream: `[upstream]`'s mechanism, user and password
/// (with a `SASL_*` protocol), or not at all.
pub fn store_sasl(config: &Config) -> Option<SaslSettings> {
    let upstream = &config.upstream;
    match (
        &upstream.sasl_mechanism,
        &upstream.username,
        &upstream.password,
    ) {
        (Some(mechanism), Some(username), Some(password))
            if upstream.security_protocol.uses_sasl() =>
        {
            Some(SaslSettings {
                mechanism: mechanism.clone(),
                username: username.clone(),
                password: password.expose().to_owned(),
            })
        }
        _ => None,
    }
}

/// The kafka store's clients' TLS: `[upstream.tls]` (its defaults without the table) with an
/// `SSL` / `SASL_SSL` protocol, or none.
pub fn store_tls(config: &Config) -> Option<TlsSettings> {
    let upstream = &config.upstream;
    upstream.security_protocol.uses_tls().then(|| {
        let t = upstream.tls.clone().unwrap_or_default();
        TlsSettings {
            ca_file: t.ca_file,
            cert_file: t.cert_file,
            key_file: t.key_file,
            verify_server_name: t.verify_server_name,
        }
    })
}

/// The kafka store's settings from `[store]`, `[cluster]` and `[upstream]`.
///
/// # Errors
/// [`NodeError::Store`] when `[store]` is not a kafka store with a cluster id.
pub fn kafka_store_settings(config: &Config, elect: bool) -> Result<KafkaStoreSettings, NodeError> {
    let cluster_id = config
        .store
        .cluster_id
        .clone()
        .filter(|_| config.store.kind == StoreKind::Kafka)
        .ok_or_else(|| {
            NodeError::Store(StoreError::Unsupported(
                "this needs [store] kind = \"kafka\" with a cluster_id".to_owned(),
            ))
        })?;
    let upstream = &config.upstream;
    let sasl = store_sasl(config);
    let tls = store_tls(config);
    let connection = KafkaConnection {
        bootstrap_servers: upstream.bootstrap_servers.clone(),
        security_protocol: upstream.security_protocol.name().to_owned(),
        sasl,
        tls,
    };
    let advertised = config
        .cluster
        .as_ref()
        .map(|c| c.advertised().to_owned())
        .unwrap_or_default();
    let mut settings = KafkaStoreSettings::new(
        connection,
        config.store.topic.clone(),
        cluster_id,
        config.node.id,
        advertised,
    );
    settings.session_timeout = std::time::Duration::from_millis(config.store.session_timeout_ms);
    settings.elect = elect;
    Ok(settings)
}
