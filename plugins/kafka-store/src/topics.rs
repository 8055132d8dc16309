//! The store's topics, created when absent: the metadata log, the election topic whose single
//! partition the group hands to the writer, and the status topic where each node reports how far
//! it has applied the log. All three have one partition and are compacted.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

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

/// Creates the topics that do not exist; checks that the metadata log has one partition.
///
/// # Errors
/// The cluster cannot be reached, refuses the creation, or the log has several partitions.
pub(crate) fn ensure(
    connection: &KafkaConnection,
    topics: &Topics,
    timeout: Duration,
) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = connection
        .client_config("portcullis-store-admin")
        .create()
        .map_err(|e| format!("cannot create the admin client: {e}"))?;
    let metadata = admin
        .inner()
        .fetch_metadata(None, timeout)
        .map_err(|e| format!("cannot read the cluster's metadata: {e}"))?;
    let brokers = metadata.brokers().len();
    let existing = |name: &str| metadata.topics().iter().find(|t| t.name() == name);
    if let Some(log) = existing(&topics.metadata) {
        if log.partitions().len() != 1 {
            return Err(format!(
                "topic {} has {} partitions; the metadata log must have exactly one (one order of \
                 writes)",
                topics.metadata,
                log.partitions().len()
            ));
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
        .map_err(|e| format!("cannot create the store's topics: {e}"))?;
    for result in results {
        match result {
            Ok(name) => {
                tracing::info!(topic = %name, replication = factor, "created a store topic")
            }
            // Another node created it meanwhile.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(format!("cannot create topic {name}: {code}")),
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
}
