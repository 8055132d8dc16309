//! Why a client connection failed ([`DriverError`]): the one error type both sides of a
//! connection (the request side in `client`, the response side in `responses`) end with.

use std::time::Duration;

use super::delegated_error::DelegatedError;
use super::frames::FrameError;
use super::rewrite::RewriteError;
use super::upstream::UpstreamError;

/// Why a connection failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum DriverError {
    #[error("client: {0}")]
    Client(#[from] FrameError),
    #[error("upstream {address}: {source}")]
    Upstream {
        address: String,
        source: UpstreamError,
    },
    #[error("{0}")]
    Delegated(#[from] DelegatedError),
    #[error("cannot rewrite the upstream's response: {0}")]
    Rewrite(#[from] RewriteError),
    #[error("cannot apply authorization to the upstream's response: {0}")]
    Authorization(#[from] portcullis::authorization::PlanError),
    #[error("the authentication step failed: {0}")]
    Step(#[from] StepFailure),
    #[error("the client read nothing for {0:?}")]
    WriteStalled(Duration),
    #[error("the response side ended unexpectedly: {0}")]
    ResponseSide(#[from] ResponseSideFailure),
    /// The forwarding policy routed a request with another identity than the one the
    /// connection's upstream was opened with: sending it would give it the wrong rights.
    #[error("the forwarding policy switched the upstream identity of a connection from {opened:?} to {requested:?}; a policy must route one session's requests with one identity")]
    IdentitySwitched {
        opened: portcullis::forwarding::UpstreamIdentity,
        requested: portcullis::forwarding::UpstreamIdentity,
    },
}

/// Why a SASL step could not run on the pool of SASL workers.
#[derive(Debug, thiserror::Error)]
pub(super) enum StepFailure {
    /// The pool was closed: the server is shutting down.
    #[error("the SASL workers are gone: {0}")]
    WorkersClosed(#[from] tokio::sync::AcquireError),
    /// The step's blocking task panicked or was cancelled.
    #[error("the step's task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// How the response side of a connection ended while requests were still served.
#[derive(Debug, thiserror::Error)]
pub(super) enum ResponseSideFailure {
    /// Its task panicked or was cancelled.
    #[error("its task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// It was gone before serving started.
    #[error("it ended before serving did")]
    EndedBeforeServing,
    /// It finished (drained or stopped) while the request side still served.
    #[error("it {0} while requests were being served")]
    Finished(&'static str),
}
