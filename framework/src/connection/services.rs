//! The node-wide services every connection uses.

use std::sync::Arc;

use crate::authorizer::Authorizer;
use crate::events::EventBus;
use crate::forwarding::ForwardingPolicy;
use crate::local::LocalHandler;
use crate::metrics::SecurityMetrics;
use crate::principal::PrincipalBuilder;
use crate::reauth::ReauthScheduler;
use crate::sasl::SaslMechanism;

/// The services a node builds once at start and every listener and connection shares: the
/// plugin instances (mechanisms, principal builder, forwarding policy, authorizer), the locally
/// served security APIs, and the node's session scheduler, counters and event bus.
///
/// They exist once, behind one `Arc`: the host's node holds it and each listener's
/// [`ConnectionConfig`](super::ConnectionConfig) holds a clone of the same `Arc`, so a new
/// service is added here and in the place that builds the node, not copied field by field along
/// the way. What may differ per listener (its name, frame limits, failure throttle, re-auth
/// limits, advertised versions) stays in `ConnectionConfig`.
#[non_exhaustive]
pub struct NodeServices {
    /// Enabled mechanisms, in the configured order.
    pub mechanisms: Vec<Arc<dyn SaslMechanism>>,
    /// Maps an authentication to a principal.
    pub principal_builder: Arc<dyn PrincipalBuilder>,
    /// Routes authenticated requests.
    pub policy: Arc<dyn ForwardingPolicy>,
    /// Where security events go.
    pub events: EventBus,
    /// Every authenticated session of the node.
    pub sessions: ReauthScheduler,
    /// Authentication counters.
    pub metrics: Arc<SecurityMetrics>,
    /// Security APIs answered locally (beyond SASL and ApiVersions).
    pub local_handlers: Vec<Arc<dyn LocalHandler>>,
    /// Authorizes every request routed upstream (`crate::authorization`); `None` forwards
    /// without checks, like a Kafka broker without an authorizer.
    pub authorizer: Option<Arc<dyn Authorizer>>,
}

impl NodeServices {
    /// The services with a fresh session scheduler and counters, no local APIs and no
    /// authorizer.
    pub fn new(
        mechanisms: Vec<Arc<dyn SaslMechanism>>,
        principal_builder: Arc<dyn PrincipalBuilder>,
        policy: Arc<dyn ForwardingPolicy>,
        events: EventBus,
    ) -> Self {
        Self {
            mechanisms,
            principal_builder,
            policy,
            events,
            sessions: ReauthScheduler::new(),
            metrics: Arc::new(SecurityMetrics::default()),
            local_handlers: Vec::new(),
            authorizer: None,
        }
    }

    /// Authorizes upstream-bound requests with `authorizer` (Kafka's per-API checks, see
    /// [`crate::authorization`]), or forwards them unchecked with `None`. With an authorizer the
    /// host must pass each upstream response through
    /// [`Forwarded::plan`](super::Forwarded::plan) and advertise only
    /// [`crate::authorization::restrict_versions`].
    pub fn with_authorizer(mut self, authorizer: Option<Arc<dyn Authorizer>>) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// Adds locally served security APIs. Their versions must also be in the advertised table
    /// (see [`ApiVersionTable::advertised_with`](crate::protocol::versions::ApiVersionTable::advertised_with)).
    pub fn with_local_handlers(mut self, handlers: Vec<Arc<dyn LocalHandler>>) -> Self {
        self.local_handlers = handlers;
        self
    }

    /// Uses the node's session scheduler and counters.
    pub fn with_sessions(
        mut self,
        sessions: ReauthScheduler,
        metrics: Arc<SecurityMetrics>,
    ) -> Self {
        self.sessions = sessions;
        self.metrics = metrics;
        self
    }

    /// The same services — session scheduler, counters, event bus, local APIs, principal
    /// builder, policy, authorizer — with other enabled mechanisms: what a reloaded
    /// configuration hands to new connections and re-authentications, while the sessions already
    /// registered stay in the one scheduler.
    pub fn with_enabled_mechanisms(&self, mechanisms: Vec<Arc<dyn SaslMechanism>>) -> Self {
        Self {
            mechanisms,
            principal_builder: Arc::clone(&self.principal_builder),
            policy: Arc::clone(&self.policy),
            events: self.events.clone(),
            sessions: self.sessions.clone(),
            metrics: Arc::clone(&self.metrics),
            local_handlers: self.local_handlers.clone(),
            authorizer: self.authorizer.clone(),
        }
    }

    /// The locally served API of this key, if any.
    pub(crate) fn local_handler(&self, api_key: i16) -> Option<&Arc<dyn LocalHandler>> {
        self.local_handlers.iter().find(|h| h.api_key() == api_key)
    }

    pub(crate) fn mechanism(&self, name: &str) -> Option<Arc<dyn SaslMechanism>> {
        self.mechanisms.iter().find(|m| m.name() == name).cloned()
    }

    pub(crate) fn enabled_mechanism_names(&self) -> Vec<String> {
        self.mechanisms
            .iter()
            .map(|m| m.name().to_owned())
            .collect()
    }
}

impl std::fmt::Debug for NodeServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeServices")
            .field("mechanisms", &self.enabled_mechanism_names())
            .field("policy", &self.policy.name())
            .field("local_apis", &self.local_handlers.len())
            .field("authorizer", &self.authorizer.is_some())
            .finish_non_exhaustive()
    }
}
