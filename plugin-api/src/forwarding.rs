//! Forwarding policies decide, per request, where it is served — and may refuse some of what an
//! upstream-bound request does (for example WRITE on topics matching a pattern).

use crate::api_keys::is_security_api;
use crate::authorizer::{Action, RequestContext};
use crate::errors::ErrorCode;
use crate::principal::Principal;

/// Who Portcullis acts as when it forwards a request upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamIdentity {
    /// Portcullis' own upstream credentials (the login module's identity).
    Service,
    /// The session's own principal: the host opens the upstream connection with an upstream
    /// delegation token owned by that principal (KIP-373), so the upstream authorizes, throttles
    /// and logs the client, not Portcullis.
    Delegated,
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
    /// Refused: the client gets the answer Kafka gives when every resource of the request is
    /// denied (TOPIC_AUTHORIZATION_FAILED per topic, ...); the code is logged.
    Reject(ErrorCode),
}

impl Route {
    /// The route of the built-in `passthrough` policy: the security APIs (SASL, ApiVersions,
    /// ACLs, delegation tokens, SCRAM credentials, Envelope) are served by Portcullis itself,
    /// everything else goes upstream as the service identity. A security API must never be
    /// forwarded with the service identity: that would give any client Portcullis' own rights.
    pub fn standard(api_key: i16) -> Route {
        if is_security_api(api_key) {
            Route::Local
        } else {
            Route::Upstream {
                identity: UpstreamIdentity::Service,
            }
        }
    }
}

/// What a policy sees of a request when it routes it.
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

    /// Whether this policy refuses individual actions of upstream-bound requests
    /// ([`ForwardingPolicy::admits`]). Asked once, when the host starts; `false` (the default)
    /// costs nothing per request.
    fn screens_actions(&self) -> bool {
        false
    }

    /// Whether an action of a request routed upstream may go ahead (called only when
    /// [`ForwardingPolicy::screens_actions`] is true, for every action the request names: one
    /// per topic, group, transactional id...). A refused action is answered as Kafka answers a
    /// denied one (TOPIC_AUTHORIZATION_FAILED for that topic's partitions, ...) and the rest of
    /// the request goes on; the authorizer, if any, decides the admitted ones.
    fn admits(&self, context: &RequestContext<'_>, action: &Action<'_>) -> bool {
        let _ = (context, action);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_route_keeps_security_apis_local() {
        assert_eq!(Route::standard(17), Route::Local);
        assert_eq!(Route::standard(51), Route::Local);
        assert_eq!(
            Route::standard(0),
            Route::Upstream {
                identity: UpstreamIdentity::Service
            }
        );
    }
}
