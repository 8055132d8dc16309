//! [`RequestError`]: a request that cannot be served at all. A value type at the bottom of the
//! connection: the authorization layer and the local handlers build it, [`super::close`] decides
//! what it means on the wire and in the log.

use kafka_protocol::messages::ApiKey;

use crate::authorization::wire::PlanError;
use crate::errors::ErrorCode;
use crate::protocol::codec::CodecError;
use crate::protocol::header::HeaderError;
use crate::protocol::reader::Malformed;

/// A request that cannot be served at all: Kafka's reaction to each is to close the connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request header does not parse.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The body does not parse (the bounds-checked reader refused it).
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// kafka-protocol could not decode a pre-authentication body or encode a response.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The upstream's response could not be merged with what authorization took out.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// An API that is never forwarded (inter-broker, or one without an authorization mapping).
    #[error("{api:?} is not served: {why}")]
    NotForwardable {
        /// The API.
        api: ApiKey,
        /// Why (a fixed sentence).
        why: &'static str,
    },
    /// A version outside the range whose body the authorization layer can read.
    #[error("{api:?} v{version} cannot be authorized (authorizable: v{min}-v{max})")]
    VersionNotAuthorizable {
        /// The API.
        api: ApiKey,
        /// The version sent.
        version: i16,
        /// The lowest authorizable version.
        min: i16,
        /// The highest authorizable version.
        max: i16,
    },
    /// A Produce with `acks=0` failed authorization: with no response to carry the error, Kafka
    /// closes the connection.
    #[error("Produce with acks=0 failed with {code}; Kafka closes the connection")]
    ProduceWithoutAcksFailed {
        /// The error the response would have carried.
        code: ErrorCode,
    },
    /// The forwarding policy rejected an API whose error response the authorization layer
    /// cannot build, so the refusal can only be a close.
    #[error("API {api_key} rejected by the forwarding policy with {code}")]
    RejectedByPolicy {
        /// The API key.
        api_key: i16,
        /// The error the policy chose.
        code: ErrorCode,
    },
    /// A mutation for the cluster's writer reached a node that is not part of a cluster (a host
    /// without `[cluster]` never builds one).
    #[error("a mutation for the cluster's writer reached a node without a cluster")]
    NotInCluster,
    /// The cluster's writer could not parse a forwarded mutation at its version.
    #[error("the cluster's writer cannot parse the request at this version")]
    WriterUnsupportedVersion,
    /// An error had to be answered, but the request is unreadable enough that no error response
    /// can be built for it.
    #[error("cannot build the {code} answer of an unreadable request")]
    NoErrorResponse {
        /// The error the answer would have carried.
        code: ErrorCode,
    },
    /// A local write lost to concurrent writes this many times in a row.
    #[error("a local write conflicted with concurrent writes {rounds} times in a row")]
    PersistContended {
        /// How many rounds were tried.
        rounds: usize,
    },
}
