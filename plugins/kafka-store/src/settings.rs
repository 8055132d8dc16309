//! The settings of a node's store ([`KafkaStoreSettings`]): how to reach the upstream, the log's
//! topic, the cluster and node ids, and the timeouts.

use std::time::Duration;

use crate::connection::KafkaConnection;

/// How a node uses the store.
#[derive(Clone, Debug)]
pub struct KafkaStoreSettings {
    /// How to reach the upstream cluster.
    pub connection: KafkaConnection,
    /// The metadata log's topic.
    pub topic: String,
    /// Nodes with the same cluster id share the log and elect one writer.
    pub cluster_id: String,
    /// This node's id (headers, status, client ids).
    pub node_id: i32,
    /// Where peers reach this node's inter-node listener (announced when it becomes the writer).
    pub advertised_address: String,
    /// The election group's session timeout: how long a writer that stopped heartbeating (killed,
    /// paused, cut off) keeps the partition before another node is elected.
    pub session_timeout: Duration,
    /// Bound on each cluster operation (topic creation, transactions).
    pub operation_timeout: Duration,
    /// Bound on the replay at start.
    pub startup_timeout: Duration,
    /// Whether this node stands for election (tools that only read do not).
    pub elect: bool,
}

impl KafkaStoreSettings {
    /// Settings with the defaults: 6 s session timeout (Kafka's smallest by default), 10 s
    /// operations, 120 s start-up, standing for election.
    pub fn new(
        connection: KafkaConnection,
        topic: impl Into<String>,
        cluster_id: impl Into<String>,
        node_id: i32,
        advertised_address: impl Into<String>,
    ) -> Self {
        Self {
            connection,
            topic: topic.into(),
            cluster_id: cluster_id.into(),
            node_id,
            advertised_address: advertised_address.into(),
            session_timeout: Duration::from_secs(6),
            operation_timeout: Duration::from_secs(10),
            startup_timeout: Duration::from_secs(120),
            elect: true,
        }
    }
}
