//! Why the tail stopped following the metadata log, or skipped one of its messages
//! ([`TailError`]); the store's shared state keeps the one that stopped it for good.

use rdkafka::error::KafkaError;

use crate::codec::DecodeError;

/// Why the metadata log cannot be followed, or why one of its messages is skipped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TailError {
    /// librdkafka refused the consumer's configuration.
    #[error("cannot create the metadata log's consumer: {}", crate::connection::client_error_text(.0))]
    CreateConsumer(KafkaError),
    /// The consumer could not be pointed at the log's beginning.
    #[error("cannot assign the metadata log: {}", crate::connection::client_error_text(.0))]
    Assign(KafkaError),
    /// A message written by another cluster's nodes (or by something else than Portcullis).
    #[error(
        "offset {offset} of {topic} belongs to cluster `{found}`, not `{cluster}`: each cluster \
         needs its own topic"
    )]
    ForeignCluster {
        /// Where in the log.
        offset: u64,
        /// The metadata log.
        topic: String,
        /// The cluster id in the message's header (empty: none).
        found: String,
        /// This node's cluster id.
        cluster: String,
    },
    /// A message of this cluster that is not one the store writes.
    #[error("offset {offset}: {error}")]
    Undecodable {
        /// Where in the log.
        offset: u64,
        /// What is wrong with it.
        error: DecodeError,
    },
}
