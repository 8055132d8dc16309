//! # The `kafka` metadata store
//!
//! The nodes of a Portcullis cluster share their security state (SCRAM credentials, ACLs,
//! delegation tokens) through the upstream Kafka cluster itself, as Confluent Schema Registry and
//! Kafka Connect do — no consensus of Portcullis' own:
//!
//! - **the log** is a compacted one-partition topic: every node replays it, then follows it, and
//!   its views are what it has applied ([`KafkaMetadataStore`]);
//! - **one writer**, elected by the upstream's group coordinator: the member of the group
//!   `portcullis-<cluster_id>` assigned the election topic's partition;
//! - **the fence**: the writer writes with a transactional producer whose `transactional.id` is the
//!   same for every writer of the cluster, so a new writer's `init_transactions` refuses every
//!   later write of a deposed one.
//!
//! The client library is librdkafka (through `rdkafka`, built from its vendored sources): its
//! transactional producer and its group membership are the parts this design leans on, and they
//! are mature there. docs/architecture.md says why, and what it costs.
#![deny(missing_docs)]
// One module calls librdkafka directly (`credentials`, which says why); nothing else may.
#![deny(unsafe_code)]

mod codec;
mod connection;
mod credentials;
mod election;
mod settings;
mod shared;
mod status;
mod store;
mod tail;
mod tail_error;
mod tools;
mod topics;
mod upstream;
mod writer;

pub use codec::{LeaderAnnouncement, HEADER_CLUSTER, HEADER_NODE, HEADER_TERM};
pub use connection::{KafkaConnection, SaslSettings, TlsSettings, SUPPORTED_MECHANISMS};
pub use credentials::CredentialsError;
pub use settings::KafkaStoreSettings;
pub use shared::{LeaderInfo, Role};
pub use status::{read as read_cluster_status, ClusterStatus, NodeStatus, StatusError};
pub use store::{KafkaMetadataStore, Progress};
pub use tools::write_offline;
pub use topics::{replication_for, Topics};
pub use upstream::{UpstreamChange, UpstreamError};
pub use writer::transactional_id;
