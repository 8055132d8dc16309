//! Why a connection closes, as types, and the one place that decides what each reason means on
//! the wire and in the log.
//!
//! Every path that gives up on a request builds a [`CloseReason`] (through [`RequestError`] when
//! the request itself is at fault); nothing carries a free-form string. [`CloseReason::disposition`]
//! is the only mapping from a reason to what the client observes and how loudly it is logged —
//! the shape of rustls' `Error` → `AlertDescription`. Errors that *are* answered with a Kafka
//! error code (a denied topic, a refused ACL binding, a failed SASL exchange) never close the
//! connection and are mapped where their response is built; the table in `docs/architecture.md`
//! lists both kinds.

use kafka_protocol::messages::ApiKey;

use crate::authorization::PlanError;
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

/// A request that is valid Kafka but not allowed in the connection's current state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IllegalState {
    /// A second ApiVersions before SaslHandshake.
    #[error("second ApiVersions before SaslHandshake")]
    SecondApiVersions,
    /// Something other than ApiVersions or SaslHandshake before authentication.
    #[error("Unexpected Kafka request of type {api_key} during SASL handshake")]
    DuringHandshake {
        /// The API key sent.
        api_key: i16,
    },
    /// Something other than SaslAuthenticate while an exchange runs.
    #[error("Unexpected Kafka request of type {api_key} during SASL authentication")]
    DuringAuthentication {
        /// The API key sent.
        api_key: i16,
    },
    /// A frame arrived while the host was deciding whether to admit the new session.
    #[error("a frame arrived before the session was admitted")]
    AwaitingAdmission,
    /// A frame arrived after the connection decided to close.
    #[error("connection is closing")]
    Closing,
}

/// Why a connection is closed without a response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CloseReason {
    /// A frame that is not a valid Kafka request, or one Kafka would close on.
    #[error(transparent)]
    InvalidRequest(#[from] RequestError),
    /// A request Kafka does not allow in the current state (logged, not answered).
    #[error(transparent)]
    IllegalState(#[from] IllegalState),
    /// An API key or version this connection does not serve.
    #[error("API {api_key} v{api_version} is not served on this connection")]
    Unsupported {
        /// The API key.
        api_key: i16,
        /// The version.
        api_version: i16,
    },
    /// The session's lifetime ended and it sent a request other than SaslHandshake (KIP-368).
    #[error("the session expired (KIP-368)")]
    SessionExpired,
    /// The session's credential was removed or changed.
    #[error("the session's credential was revoked")]
    CredentialRevoked,
    /// A frame above the size limit.
    #[error("a frame of {size} bytes exceeds the limit of {limit}")]
    FrameTooLarge {
        /// The announced size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// How a close is logged. A client's own mistakes and ordinary session ends are `Debug` (a client
/// must not be able to flood the log); what points at a bug or an operator's decision is louder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogLevel {
    /// Routine: expected in normal operation or caused by the client alone.
    Debug,
    /// Worth an operator's attention: a policy refused something a client tried.
    Info,
    /// Points at a defect here or upstream (a response that cannot be encoded or merged).
    Warn,
}

/// What the client observes when a connection closes for a reason, and how it is logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Disposition {
    /// Responses to requests that arrived before the offending one are still delivered (in
    /// order) before the close; nothing is sent for the offending request itself.
    pub earlier_responses_delivered: bool,
    /// How loudly the host logs it.
    pub log: LogLevel,
}

impl CloseReason {
    /// The one mapping from a reason to the wire and the log (see the module docs).
    pub fn disposition(&self) -> Disposition {
        let (earlier_responses_delivered, log) = match self {
            // KIP-368: Kafka reads one request at a time, so everything before the expired
            // request was answered; the host drains in-flight responses first.
            CloseReason::SessionExpired => (true, LogLevel::Debug),
            CloseReason::CredentialRevoked => (false, LogLevel::Info),
            CloseReason::FrameTooLarge { .. } => (false, LogLevel::Info),
            CloseReason::IllegalState(_) | CloseReason::Unsupported { .. } => {
                (false, LogLevel::Debug)
            }
            CloseReason::InvalidRequest(e) => (false, e.log_level()),
        };
        Disposition {
            earlier_responses_delivered,
            log,
        }
    }
}

impl RequestError {
    fn log_level(&self) -> LogLevel {
        match self {
            RequestError::Header(_) | RequestError::Malformed(_) => LogLevel::Debug,
            RequestError::Codec(CodecError::Decode { .. }) => LogLevel::Debug,
            RequestError::NotForwardable { .. }
            | RequestError::VersionNotAuthorizable { .. }
            | RequestError::ProduceWithoutAcksFailed { .. }
            | RequestError::RejectedByPolicy { .. } => LogLevel::Info,
            RequestError::Codec(_)
            | RequestError::Plan(_)
            | RequestError::PersistContended { .. }
            | RequestError::NotInCluster
            | RequestError::WriterUnsupportedVersion
            | RequestError::NoErrorResponse { .. } => LogLevel::Warn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_cannot_make_the_log_loud() {
        let client_caused = [
            CloseReason::from(RequestError::Malformed(Malformed("cut"))),
            CloseReason::from(RequestError::Header(HeaderError::TooShort(3))),
            CloseReason::from(IllegalState::SecondApiVersions),
            CloseReason::Unsupported {
                api_key: 99,
                api_version: 0,
            },
            CloseReason::SessionExpired,
        ];
        for reason in client_caused {
            assert_eq!(reason.disposition().log, LogLevel::Debug, "{reason}");
        }
    }

    #[test]
    fn only_an_expired_session_delivers_earlier_responses() {
        assert!(
            CloseReason::SessionExpired
                .disposition()
                .earlier_responses_delivered
        );
        assert!(
            !CloseReason::CredentialRevoked
                .disposition()
                .earlier_responses_delivered
        );
    }

    #[test]
    fn reasons_read_as_sentences() {
        let reason = CloseReason::from(RequestError::ProduceWithoutAcksFailed {
            code: ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        });
        assert!(reason.to_string().contains("acks=0"), "{reason}");
    }
}
