//! The store's topics, created when absent: the metadata log, the election topic whose single
//! partition the group hands to the writer, and the status topic where each node reports how far
//! it has applied the log. All three have one partition and are compacted.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::connection::KafkaConnection;

/// The names of a store's topics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topics {
    /// The metadata log.
    pub metadata: String,
    /// The election topic (nothing is written to it; its partition is the writer's token).
    pub election: String,
    /// Each node's status (applied offset, role), keyed by node id.
    pub status: String,
}

impl Topics {
    /// The topics of the store whose log is `metadata`.
    pub fn for_log(metadata: &str) -> Self {
        Self {
            metadata: metadata.to_owned(),
            election: format!("{metadata}.election"),
            status: format!("{metadata}.status"),
        }
    }
}

/// Replication for a new topic on a cluster of `brokers`: factor min(3, brokers), and
/// `min.insync.replicas` one less (at least 1), so one broker may be down while writes go on.
pub fn replication_for(brokers: usize) -> (i32, i32) {
    let factor = brokers.clamp(1, 3) as i32;
    (factor, (factor - 1).max(1))
}

/// Why the store's topics cannot be made ready.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TopicError {
    /// librdkafka refused the admin client's configuration.
    #[error("cannot create the admin client: {0}")]
    CreateAdmin(KafkaError),
    /// The cluster did not answer the metadata request (unreachable, or the login refused).
    #[error("cannot read the cluster's metadata: {0}")]
    Metadata(KafkaError),
    /// The metadata log exists with several partitions.
    #[error(
        "topic {topic} has {partitions} partitions; the metadata log must have exactly one (one \
         order of writes)"
    )]
    LogPartitions {
        /// The metadata log.
        topic: String,
        /// How many partitions it has.
        partitions: usize,
    },
    /// The creation request failed as a whole.
    #[error("cannot create the store's topics: {0}")]
    CreateTopics(KafkaError),
    /// The cluster refused to create one topic.
    #[error("cannot create topic {topic}: {code}")]
    CreateTopic {
        /// The topic.
        topic: String,
        /// Kafka's error code.
        code: RDKafkaErrorCode,
    },
}

/// Creates the topics that do not exist; checks that the metadata log has one partition.
///
/// # Errors
/// The cluster cannot be reached, refuses the creation, or the log has several partitions.
pub(crate) fn ensure(
    connection: &KafkaConnection,
    topics: &Topics,
    timeout: Duration,
) -> Result<(), TopicError> {
    let admin: AdminClient<DefaultClientContext> = connection
        .client_config("portcullis-store-admin")
        .create()
        .map_err(TopicError::CreateAdmin)?;
    let metadata = admin
        .inner()
        .fetch_metadata(None, timeout)
        .map_err(TopicError::Metadata)?;
    let brokers = metadata.brokers().len();
    let existing = |name: &str| metadata.topics().iter().find(|t| t.name() == name);
    if let Some(log) = existing(&topics.metadata) {
        if log.partitions().len() != 1 {
            return Err(TopicError::LogPartitions {
                topic: topics.metadata.clone(),
                partitions: log.partitions().len(),
            });
        }
    }
    let (factor, min_isr) = replication_for(brokers);
    let min_isr = min_isr.to_string();
    let missing: Vec<&String> = [&topics.metadata, &topics.election, &topics.status]
        .into_iter()
        .filter(|name| existing(name).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let new_topics: Vec<NewTopic<'_>> = missing
        .iter()
        .map(|name| {
            NewTopic::new(name, 1, TopicReplication::Fixed(factor))
                .set("cleanup.policy", "compact")
                .set("min.insync.replicas", &min_isr)
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results = futures_executor::block_on(admin.create_topics(&new_topics, &options))
        .map_err(TopicError::CreateTopics)?;
    for result in results {
        match result {
            Ok(name) => {
                tracing::info!(topic = %name, replication = factor, "created a store topic")
            }
            // Another node created it meanwhile.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(TopicError::CreateTopic { topic, code }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_is_at_most_three_and_leaves_one_broker_spare() {
        assert_eq!(replication_for(1), (1, 1));
        assert_eq!(replication_for(2), (2, 1));
        assert_eq!(replication_for(3), (3, 2));
        assert_eq!(replication_for(7), (3, 2));
    }

    #[test]
    fn topic_names_derive_from_the_log() {
        let t = Topics::for_log("__portcullis_metadata");
        assert_eq!(t.election, "__portcullis_metadata.election");
        assert_eq!(t.status, "__portcullis_metadata.status");
    }

    #[test]
    fn errors_say_what_failed() {
        let several = TopicError::LogPartitions {
            topic: "__portcullis_metadata".into(),
            partitions: 3,
        };
        assert_eq!(
            several.to_string(),
            "topic __portcullis_metadata has 3 partitions; the metadata log must have exactly one \
             (one order of writes)"
        );
        let refused = TopicError::CreateTopic {
            topic: "__portcullis_metadata.status".into(),
            code: RDKafkaErrorCode::TopicAuthorizationFailed,
        };
        assert!(
            refused
                .to_string()
                .starts_with("cannot create topic __portcullis_metadata.status: "),
            "{refused}"
        );
    }

    #[test]
    fn an_unreachable_cluster_is_an_error_that_says_so() {
        // Nothing listens on port 1: the metadata request times out.
        let connection = KafkaConnection {
            bootstrap_servers: vec!["127.0.0.1:1".into()],
            security_protocol: "PLAINTEXT".into(),
            sasl: None,
            tls: None,
        };
        let topics = Topics::for_log("__portcullis_metadata");
        let error = ensure(&connection, &topics, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(error, TopicError::Metadata(_)), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with("cannot read the cluster's metadata: "),
            "{error}"
        );
    }
}
