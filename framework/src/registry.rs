//! The registry of built-in plugins. Built-in crates register a factory with
//! `inventory::submit!`; the host links them and looks them up by name. (Dynamic plugins are
//! loaded by the host through [`crate::abi`] instead: a cdylib has its own copy of this registry.)

use std::sync::Arc;

use crate::authorizer::Authorizer;
use crate::credentials::{CredentialView, TokenView};
use crate::events::EventBus;
use crate::forwarding::ForwardingPolicy;
use crate::sasl::SaslMechanism;
use crate::store::MetadataStore;

/// What the host hands every plugin it builds.
#[derive(Clone)]
#[non_exhaustive]
pub struct Services {
    /// User credentials.
    pub credentials: Arc<dyn CredentialView>,
    /// Delegation tokens.
    pub tokens: Arc<dyn TokenView>,
    /// The event bus.
    pub events: EventBus,
}

impl Services {
    /// Bundles the services.
    pub fn new(
        credentials: Arc<dyn CredentialView>,
        tokens: Arc<dyn TokenView>,
        events: EventBus,
    ) -> Self {
        Self {
            credentials,
            tokens,
            events,
        }
    }
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services").finish_non_exhaustive()
    }
}

/// A built-in SASL mechanism.
pub struct MechanismFactory {
    /// The mechanism name.
    pub name: &'static str,
    /// Builds the mechanism.
    pub build: fn(&Services) -> Arc<dyn SaslMechanism>,
}

inventory::collect!(MechanismFactory);

/// Settings every forwarding policy receives.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ForwardingSettings {
    /// API keys refused outright.
    pub deny_api_keys: Vec<i16>,
}

impl ForwardingSettings {
    /// Creates settings.
    pub fn new(deny_api_keys: Vec<i16>) -> Self {
        Self { deny_api_keys }
    }
}

/// A built-in forwarding policy.
pub struct PolicyFactory {
    /// The policy name.
    pub name: &'static str,
    /// Builds the policy.
    pub build: fn(&ForwardingSettings) -> Arc<dyn ForwardingPolicy>,
}

inventory::collect!(PolicyFactory);

/// Settings every authorizer receives (Kafka's `super.users` and
/// `allow.everyone.if.no.acl.found`).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct AuthorizerSettings {
    /// Principals allowed everything, each `type:name`, compared as exact strings.
    pub super_users: Vec<String>,
    /// The decision when no ACL at all applies to a resource (Kafka's default: false).
    pub allow_everyone_if_no_acl_found: bool,
    /// Where the authorizer publishes [`crate::events::Event::AclsChanged`], if anywhere.
    pub events: Option<EventBus>,
}

impl AuthorizerSettings {
    /// Creates settings with no event bus.
    pub fn new(super_users: Vec<String>, allow_everyone_if_no_acl_found: bool) -> Self {
        Self {
            super_users,
            allow_everyone_if_no_acl_found,
            events: None,
        }
    }

    /// Publishes ACL changes on `events`.
    pub fn with_events(mut self, events: EventBus) -> Self {
        self.events = Some(events);
        self
    }
}

/// How a built-in authorizer is built: settings and the node's metadata store in, the
/// authorizer (or why it cannot start) out.
pub type AuthorizerBuildFn =
    fn(&AuthorizerSettings, Arc<dyn MetadataStore>) -> Result<Arc<dyn Authorizer>, String>;

/// A built-in authorizer. `build` replays the ACLs already in the store, so the authorizer is
/// ready when it returns; an error (bad settings, unreadable store) must stop the node.
pub struct AuthorizerFactory {
    /// The authorizer name (`authorizer = "<name>"` in the configuration).
    pub name: &'static str,
    /// Builds the authorizer on the node's metadata store.
    pub build: AuthorizerBuildFn,
}

inventory::collect!(AuthorizerFactory);

/// Every built-in mechanism linked into this binary.
pub fn mechanisms() -> impl Iterator<Item = &'static MechanismFactory> {
    inventory::iter::<MechanismFactory>.into_iter()
}

/// Every built-in forwarding policy linked into this binary.
pub fn policies() -> impl Iterator<Item = &'static PolicyFactory> {
    inventory::iter::<PolicyFactory>.into_iter()
}

/// Every built-in authorizer linked into this binary.
pub fn authorizers() -> impl Iterator<Item = &'static AuthorizerFactory> {
    inventory::iter::<AuthorizerFactory>.into_iter()
}
