//! Forwarding policies decide, per request, where it is served.

use crate::errors::ErrorCode;
use crate::principal::Principal;

/// Who Portcullis acts as when it forwards a request upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamIdentity {
    /// Portcullis' own upstream credentials (the login module's identity).
    Service,
}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub enum Route {
    /// Served by Portcullis itself.
    Local,
    /// Forwarded to the upstream broker the connection targets.
    Upstream {
        /// The identity used upstream.
        identity: UpstreamIdentity,
    },
    /// Forwarded to the node that owns security metadata (KIP-590 envelope).
    Controller,
    /// Refused with this error code.
    Reject(ErrorCode),
}

/// What a policy sees of a request.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RequestInfo<'a> {
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The session's principal.
    pub principal: &'a Principal,
}

impl<'a> RequestInfo<'a> {
    /// Creates a request description.
    pub fn new(api_key: i16, api_version: i16, principal: &'a Principal) -> Self {
        Self {
            api_key,
            api_version,
            principal,
        }
    }
}

/// Decides where each authenticated request goes.
pub trait ForwardingPolicy: Send + Sync {
    /// The policy's name, as configured in `[forwarding] policy`.
    fn name(&self) -> &str;
    /// Routes one request.
    fn route(&self, request: &RequestInfo<'_>) -> Route;
}
