//! Why a connection to the upstream cluster failed ([`UpstreamError`]), for every module that
//! opens or uses one.

use portcullis::login::LoginError;

use super::frames::FrameError;
use super::relay::RelayError;
use super::wire::WireError;

/// Why an upstream connection failed. Never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No address to connect to.
    #[error("no upstream address for {0}")]
    NoAddress(String),
    /// TCP connect failed.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// The address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// Connecting and authenticating took longer than `connect_timeout_ms`.
    #[error("connecting to {0} timed out")]
    Timeout(String),
    /// The TLS handshake failed (e.g. an untrusted certificate, or one for another name).
    #[error("TLS handshake with {address} failed: {reason}")]
    Tls {
        /// The address.
        address: String,
        /// Why (rustls' reason).
        reason: String,
    },
    /// One of Portcullis' own requests got no answer within `connect_timeout_ms`.
    #[error("{0} did not answer within the upstream timeout (connect_timeout_ms)")]
    NoAnswer(String),
    /// Reading or writing failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The upstream closed the connection.
    #[error("upstream closed the connection")]
    Closed,
    /// A response that does not parse.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A response stream that does not answer the requests sent.
    #[error(transparent)]
    Response(#[from] RelayError),
    /// A response to a request that was not sent.
    #[error("upstream answered correlation id {got}, expected {expected}")]
    OutOfOrder {
        /// The id waited for.
        expected: i32,
        /// The id received.
        got: i32,
    },
    /// The upstream refused a request with an error code.
    #[error("upstream {api} failed with error code {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Refused {
        /// The request.
        api: &'static str,
        /// The error code.
        code: i16,
        /// The upstream's message, if any.
        message: Option<String>,
    },
    /// The upstream does not support a version Portcullis needs.
    #[error("upstream does not support {0}")]
    Unsupported(&'static str),
    /// The login module failed.
    #[error(transparent)]
    Login(#[from] LoginError),
    /// The SASL exchange did not finish.
    #[error("upstream SASL exchange did not complete")]
    Incomplete,
}
