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

use super::request_error::RequestError;
use crate::protocol::codec::CodecError;

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
    use crate::errors::ErrorCode;
    use crate::protocol::header::HeaderError;
    use crate::protocol::reader::Malformed;

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
