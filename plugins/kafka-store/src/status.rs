//! Node status: every second each node writes, keyed by its node id, how far it has applied the
//! log, what it is, and where its inter-node listener is, to the compacted status topic.
//! `portcullis cluster status` reads the topic ([`read`]) and the log's end offset to show the
//! nodes, the writer and each node's lag.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset as KafkaOffset, TopicPartitionList};

use crate::connection::{KafkaConnection, StoreContext};
use crate::credentials::Follower;
use crate::shared::{Role, Shared};
use crate::topics::Topics;

/// How often a node reports.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// One node's report.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeStatus {
    /// The node id.
    pub node_id: i32,
    /// Its inter-node listener.
    pub address: String,
    /// `writer`, `activating` or `follower`.
    pub role: String,
    /// Its writer term, when it is the writer.
    pub term: Option<u64>,
    /// The next offset it will apply.
    pub applied: u64,
    /// The log's end offset as the node last saw it (`None`: unknown).
    pub log_end: Option<u64>,
    /// When it reported (ms since the epoch).
    pub reported_at_ms: i64,
    /// The fingerprint of the configuration it runs (absent in reports of older builds).
    #[serde(default)]
    pub config_fingerprint: Option<String>,
}

/// The status producer, with the login of the moment.
fn producer(shared: &Shared) -> Result<(BaseProducer<StoreContext>, Follower), KafkaError> {
    let settings = &shared.settings;
    let (generation, connection) = shared.connection();
    let producer = connection
        .client_config(&format!(
            "portcullis-{}-status-{}",
            settings.cluster_id, settings.node_id
        ))
        .set("linger.ms", "0")
        .set("message.timeout.ms", "5000")
        .create_with_context(StoreContext)?;
    Ok((producer, Follower::at(generation)))
}

pub(crate) fn publish(shared: Arc<Shared>) {
    let settings = &shared.settings;
    let (mut producer, mut credentials) = match producer(&shared) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %crate::connection::client_error_text(&e), "cannot create the status producer; `cluster status` will not list this node");
            return;
        }
    };
    let key = settings.node_id.to_string();
    while !shared.stop.load(Ordering::Acquire) {
        credentials.follow(&shared.upstream, producer.client(), "status");
        if credentials.must_remake(&shared.upstream) {
            match self::producer(&shared) {
                Ok((remade, follower)) => {
                    // The reports still queued in the old one go first.
                    let _ = producer.flush(Duration::from_secs(2));
                    (producer, credentials) = (remade, follower);
                    tracing::info!(
                        client = %"status",
                        "the metadata store's client is made again with the reloaded upstream settings"
                    );
                }
                Err(error) => {
                    credentials.remake_failed();
                    tracing::error!(client = %"status", error = %crate::connection::client_error_text(&error), "the metadata store's client could not be made again with the reloaded upstream settings; it keeps the one it has and tries again in 5 s");
                }
            }
        }
        let log_end = producer
            .client()
            .fetch_watermarks(&shared.topics.metadata, 0, Duration::from_secs(2))
            .ok()
            .map(|(_, high)| high.max(0) as u64);
        let applied = shared.state().next_offset;
        let (role, term) = match shared.role_view() {
            Role::Writer { term } => ("writer", Some(term)),
            Role::Activating => ("activating", None),
            Role::Follower => ("follower", None),
        };
        let status = NodeStatus {
            node_id: settings.node_id,
            address: settings.advertised_address.clone(),
            role: role.to_owned(),
            term,
            applied,
            log_end,
            reported_at_ms: now_ms(),
            config_fingerprint: shared
                .config_fingerprint
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        };
        let value = serde_json::to_vec(&status).unwrap_or_default();
        let record = BaseRecord::to(&shared.topics.status)
            .partition(0)
            .key(&key)
            .payload(&value);
        if let Err((error, _)) = producer.send(record) {
            tracing::debug!(%error, "cannot report this node's status");
        }
        producer.poll(Duration::ZERO);
        // Sleep in small steps so that a stopping node does not wait a whole interval.
        let mut slept = Duration::ZERO;
        while slept < INTERVAL && !shared.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(100));
            producer.poll(Duration::ZERO);
            slept += Duration::from_millis(100);
        }
    }
    let _ = producer.flush(Duration::from_secs(2));
}

/// What `portcullis cluster status` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The latest report of each node that ever reported, by node id.
    pub nodes: BTreeMap<i32, NodeStatus>,
    /// The log's end offset now.
    pub log_end: u64,
}

/// Why the cluster's status cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    /// librdkafka refused the consumer's configuration.
    #[error("cannot create a consumer: {0}")]
    CreateConsumer(KafkaError),
    /// The end offset of a topic could not be read (the cluster is unreachable, or the login or
    /// the topic's ACLs refuse it).
    #[error("cannot read the end of {topic}: {error}")]
    Watermarks {
        /// The topic.
        topic: String,
        /// Why.
        error: KafkaError,
    },
    /// The consumer could not be pointed at the status topic's beginning.
    #[error("cannot start reading {topic}: {error}")]
    Assign {
        /// The status topic.
        topic: String,
        /// Why.
        error: KafkaError,
    },
    /// Reading the status topic failed.
    #[error("cannot read {topic}: {error}")]
    Read {
        /// The status topic.
        topic: String,
        /// Why.
        error: KafkaError,
    },
}

/// Reads every node's latest report and the log's end offset.
///
/// # Errors
/// The cluster cannot be reached ([`StatusError`] says which step failed).
pub fn read(
    connection: &KafkaConnection,
    topics: &Topics,
    timeout: Duration,
) -> Result<ClusterStatus, StatusError> {
    let consumer: BaseConsumer<StoreContext> = connection
        .client_config("portcullis-cluster-status")
        .set("group.id", "portcullis-cluster-status")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create_with_context(StoreContext)
        .map_err(StatusError::CreateConsumer)?;
    let (_, log_end) = consumer
        .fetch_watermarks(&topics.metadata, 0, timeout)
        .map_err(|error| StatusError::Watermarks {
            topic: topics.metadata.clone(),
            error,
        })?;
    let (low, high) = consumer
        .fetch_watermarks(&topics.status, 0, timeout)
        .map_err(|error| StatusError::Watermarks {
            topic: topics.status.clone(),
            error,
        })?;
    let mut nodes = BTreeMap::new();
    if high > low {
        let assign = |error| StatusError::Assign {
            topic: topics.status.clone(),
            error,
        };
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&topics.status, 0, KafkaOffset::Beginning)
            .map_err(assign)?;
        consumer.assign(&assignment).map_err(assign)?;
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => {
                    if let Some(status) = message
                        .payload()
                        .and_then(|p| serde_json::from_slice::<NodeStatus>(p).ok())
                    {
                        nodes.insert(status.node_id, status);
                    }
                    if message.offset() + 1 >= high {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(error)) => {
                    return Err(StatusError::Read {
                        topic: topics.status.clone(),
                        error,
                    })
                }
                None => {}
            }
        }
    }
    Ok(ClusterStatus {
        nodes,
        log_end: log_end.max(0) as u64,
    })
}

fn now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_cluster_names_the_topic_it_could_not_read() {
        // Nothing listens on port 1: the first watermark request times out.
        let connection = KafkaConnection {
            bootstrap_servers: vec!["127.0.0.1:1".into()],
            security_protocol: "PLAINTEXT".into(),
            sasl: None,
            tls: None,
        };
        let topics = Topics::for_log("__portcullis_metadata");
        let error = read(&connection, &topics, Duration::from_millis(200)).unwrap_err();
        match &error {
            StatusError::Watermarks { topic, .. } => assert_eq!(topic, "__portcullis_metadata"),
            other => panic!("{other:?}"),
        }
        assert!(
            error
                .to_string()
                .starts_with("cannot read the end of __portcullis_metadata: "),
            "{error}"
        );
        // The host's `cluster status` turns it into an anyhow error.
        fn send_sync_static<E: std::error::Error + Send + Sync + 'static>(_: &E) {}
        send_sync_static(&error);
    }

    #[test]
    fn a_report_without_a_fingerprint_still_reads() {
        let old = r#"{"node_id":1,"address":"a:1","role":"follower","term":null,"applied":3,"log_end":4,"reported_at_ms":5}"#;
        let status: super::NodeStatus = serde_json::from_str(old).unwrap();
        assert_eq!(status.config_fingerprint, None);
        let mut new = status.clone();
        new.config_fingerprint = Some("0123456789abcdef".into());
        let again: super::NodeStatus =
            serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(again, new);
    }
}
