//! The registry of built-in plugins, one inventory per kind. Built-in crates register a factory
//! with `inventory::submit!`; the host links them and looks them up by name, exactly as it looks
//! up a dynamic plugin loaded from its plugin directory (a cdylib has its own copy of this
//! registry, which the host never sees: dynamic plugins go through [`crate::abi`]).
//!
//! Every factory gets the TOML text of its `[plugins.config.<name>]` table (empty when there is
//! none) and the [`Host`] services, like a dynamic plugin; [`MechanismFactory::of`] and its
//! siblings make a factory out of any [`Plugin`], and a factory's `check_config` validates a
//! configuration without building anything (for `portcullis plugins`).

use std::path::PathBuf;
use std::sync::Arc;

use portcullis_plugin_api::{parse_config, ConfigError};
use serde::de::DeserializeOwned;

use crate::authorizer::Authorizer;
use crate::events::{EventBus, EventSubscriber};
use crate::forwarding::ForwardingPolicy;
use crate::host::Host;
use crate::login::LoginModule;
use crate::plugin::{self, Plugin, PluginError};
use crate::principal::{DefaultPrincipalBuilder, PrincipalBuilder};
use crate::sasl::SaslMechanism;
use crate::secret::Secret;
use crate::store::{MetadataStore, StoreError};
use portcullis_plugin_api::PluginKind;

/// A plugin instance of any kind, built in or dynamic.
#[derive(Clone)]
#[non_exhaustive]
pub enum PluginInstance {
    /// A SASL mechanism.
    SaslMechanism(Arc<dyn SaslMechanism>),
    /// An authorizer.
    Authorizer(Arc<dyn Authorizer>),
    /// A principal builder.
    PrincipalBuilder(Arc<dyn PrincipalBuilder>),
    /// A login module.
    LoginModule(Arc<dyn LoginModule>),
    /// A forwarding policy.
    ForwardingPolicy(Arc<dyn ForwardingPolicy>),
    /// An event subscriber.
    EventSubscriber(Arc<dyn EventSubscriber>),
}

impl PluginInstance {
    /// The instance's kind.
    pub fn kind(&self) -> PluginKind {
        match self {
            PluginInstance::SaslMechanism(_) => PluginKind::SaslMechanism,
            PluginInstance::Authorizer(_) => PluginKind::Authorizer,
            PluginInstance::PrincipalBuilder(_) => PluginKind::PrincipalBuilder,
            PluginInstance::LoginModule(_) => PluginKind::LoginModule,
            PluginInstance::ForwardingPolicy(_) => PluginKind::ForwardingPolicy,
            PluginInstance::EventSubscriber(_) => PluginKind::EventSubscriber,
        }
    }
}

impl std::fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginInstance::SaslMechanism(m) => write!(f, "SaslMechanism({})", m.name()),
            PluginInstance::ForwardingPolicy(p) => write!(f, "ForwardingPolicy({})", p.name()),
            PluginInstance::LoginModule(l) => write!(f, "LoginModule({})", l.mechanism()),
            other => write!(f, "{}", other.kind()),
        }
    }
}

/// Validates a configuration text for `C` without building anything (a factory's
/// `check_config`: `check_config::<NoConfig>` for a plugin that takes none).
pub fn check_config<C: DeserializeOwned>(text: &str) -> Result<(), ConfigError> {
    parse_config::<C>(text).map(drop)
}

/// A configuration check, as each factory carries one.
pub type CheckConfigFn = fn(&str) -> Result<(), ConfigError>;

/// How a built-in plugin is built from its configuration text and host services.
pub type BuildFn<T> = fn(&str, &Host) -> Result<Arc<T>, PluginError>;

/// A built-in SASL mechanism. Its name is the mechanism name clients send.
pub struct MechanismFactory {
    /// The mechanism (and plugin) name.
    pub name: &'static str,
    /// Builds the mechanism from its configuration text.
    pub build: BuildFn<dyn SaslMechanism>,
    /// Validates a configuration text.
    pub check_config: CheckConfigFn,
}

impl MechanismFactory {
    /// The factory of plugin `T`.
    pub const fn of<T: Plugin + SaslMechanism>() -> Self {
        Self {
            name: T::NAME,
            build: |text, host| Ok(Arc::new(plugin::build::<T>(text, host)?)),
            check_config: check_config::<T::Config>,
        }
    }
}

inventory::collect!(MechanismFactory);

/// Settings every forwarding policy receives besides its own table (`[forwarding]`).
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

/// How a built-in forwarding policy is built (with `[forwarding]`'s settings).
pub type PolicyBuildFn =
    fn(&str, &Host, &ForwardingSettings) -> Result<Arc<dyn ForwardingPolicy>, PluginError>;

/// A built-in forwarding policy.
pub struct PolicyFactory {
    /// The policy name (`[forwarding] policy = "<name>"`).
    pub name: &'static str,
    /// Builds the policy.
    pub build: PolicyBuildFn,
    /// Validates a configuration text.
    pub check_config: CheckConfigFn,
}

inventory::collect!(PolicyFactory);

/// Settings every authorizer receives besides its own table (Kafka's `super.users` and
/// `allow.everyone.if.no.acl.found`, from `[authorizer]`).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct AuthorizerSettings {
    /// Principals allowed everything, each `type:name`, compared as exact strings.
    pub super_users: Vec<String>,
    /// The decision when no ACL at all applies to a resource (Kafka's default: false).
    pub allow_everyone_if_no_acl_found: bool,
    /// Where the authorizer publishes [`crate::events::Event::AclsChanged`], if anywhere.
    pub events: Option<EventBus>,
    /// The host's handle on `super_users`, when it changes them without a restart (a
    /// configuration reload): an authorizer that reads its super users from here applies a
    /// reload to every decision after it.
    pub live_super_users: Option<LiveSuperUsers>,
    /// The same for `allow_everyone_if_no_acl_found`.
    pub live_allow_everyone: Option<LiveAllowEveryone>,
}

/// `[authorizer] allow_everyone_if_no_acl_found`, shared like [`LiveSuperUsers`]: the host sets
/// it on a reload, the authorizer reads it on each decision that found no ACL at all.
#[derive(Clone, Debug, Default)]
pub struct LiveAllowEveryone(Arc<std::sync::atomic::AtomicBool>);

impl LiveAllowEveryone {
    /// A handle holding `allow`.
    pub fn new(allow: bool) -> Self {
        Self(Arc::new(std::sync::atomic::AtomicBool::new(allow)))
    }

    /// The setting now.
    pub fn get(&self) -> bool {
        // A lone flag, ordering nothing else: a decision racing a reload may see either value.
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets it for every decision after this call.
    pub fn set(&self, allow: bool) {
        self.0.store(allow, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `[authorizer] super_users`, shared between the host (which replaces them when its
/// configuration is reloaded) and the authorizer (which reads them on each decision). Readers
/// load an immutable snapshot and never lock.
#[derive(Clone, Debug, Default)]
pub struct LiveSuperUsers(Arc<arc_swap::ArcSwap<Vec<String>>>);

impl LiveSuperUsers {
    /// A handle holding `super_users`.
    pub fn new(super_users: Vec<String>) -> Self {
        Self(Arc::new(arc_swap::ArcSwap::from_pointee(super_users)))
    }

    /// The super users now.
    pub fn load(&self) -> arc_swap::Guard<Arc<Vec<String>>> {
        self.0.load()
    }

    /// Replaces the super users for every decision after this call.
    pub fn store(&self, super_users: Vec<String>) {
        self.0.store(Arc::new(super_users));
    }
}

impl AuthorizerSettings {
    /// Creates settings with no event bus.
    pub fn new(super_users: Vec<String>, allow_everyone_if_no_acl_found: bool) -> Self {
        Self {
            super_users,
            allow_everyone_if_no_acl_found,
            events: None,
            live_super_users: None,
            live_allow_everyone: None,
        }
    }

    /// Shares `allow_everyone_if_no_acl_found` through `live`, which the host may change later.
    pub fn with_live_allow_everyone(mut self, live: LiveAllowEveryone) -> Self {
        self.live_allow_everyone = Some(live);
        self
    }

    /// Shares `super_users` through `live`, which the host may replace later.
    pub fn with_live_super_users(mut self, live: LiveSuperUsers) -> Self {
        self.live_super_users = Some(live);
        self
    }

    /// Publishes ACL changes on `events`.
    pub fn with_events(mut self, events: EventBus) -> Self {
        self.events = Some(events);
        self
    }
}

/// What a built-in authorizer is built from.
#[non_exhaustive]
pub struct AuthorizerInput<'a> {
    /// Its configuration table's text.
    pub config: &'a str,
    /// The host services.
    pub host: &'a Host,
    /// `[authorizer]`'s settings.
    pub settings: &'a AuthorizerSettings,
    /// The node's metadata store (ACLs live in it).
    pub store: Arc<dyn MetadataStore>,
}

impl<'a> AuthorizerInput<'a> {
    /// Bundles the inputs.
    pub fn new(
        config: &'a str,
        host: &'a Host,
        settings: &'a AuthorizerSettings,
        store: Arc<dyn MetadataStore>,
    ) -> Self {
        Self {
            config,
            host,
            settings,
            store,
        }
    }
}

/// How a built-in authorizer is built: its inputs in, the authorizer (or why it cannot start)
/// out.
pub type AuthorizerBuildFn = fn(&AuthorizerInput<'_>) -> Result<Arc<dyn Authorizer>, PluginError>;

/// A built-in authorizer. `build` replays the ACLs already in the store, so the authorizer is
/// ready when it returns; an error (bad settings, unreadable store) must stop the node.
pub struct AuthorizerFactory {
    /// The authorizer name (`[authorizer] plugin = "<name>"`).
    pub name: &'static str,
    /// Builds the authorizer.
    pub build: AuthorizerBuildFn,
    /// Validates a configuration text.
    pub check_config: CheckConfigFn,
}

inventory::collect!(AuthorizerFactory);

/// A built-in principal builder.
pub struct PrincipalBuilderFactory {
    /// The name (`[principal] plugin = "<name>"`).
    pub name: &'static str,
    /// Builds the principal builder.
    pub build: BuildFn<dyn PrincipalBuilder>,
    /// Validates a configuration text.
    pub check_config: CheckConfigFn,
}

impl PrincipalBuilderFactory {
    /// The factory of plugin `T`.
    pub const fn of<T: Plugin + PrincipalBuilder>() -> Self {
        Self {
            name: T::NAME,
            build: |text, host| Ok(Arc::new(plugin::build::<T>(text, host)?)),
            check_config: check_config::<T::Config>,
        }
    }
}

inventory::collect!(PrincipalBuilderFactory);

/// The name of the built-in principal builder used when none is configured.
pub const DEFAULT_PRINCIPAL_BUILDER: &str = <DefaultPrincipalBuilder as Plugin>::NAME;

inventory::submit! {
    PrincipalBuilderFactory::of::<DefaultPrincipalBuilder>()
}

/// The upstream settings a built-in login module may use (`[upstream]`'s `sasl_mechanism`,
/// `username`, `password`).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LoginSettings {
    /// The SASL mechanism.
    pub mechanism: Option<String>,
    /// The user name.
    pub username: Option<String>,
    /// The password.
    pub password: Option<Secret>,
}

impl LoginSettings {
    /// Creates settings.
    pub fn new(
        mechanism: Option<String>,
        username: Option<String>,
        password: Option<Secret>,
    ) -> Self {
        Self {
            mechanism,
            username,
            password,
        }
    }
}

/// How a built-in login module is built (with `[upstream]`'s settings).
pub type LoginBuildFn =
    fn(&str, &Host, &LoginSettings) -> Result<Arc<dyn LoginModule>, PluginError>;

/// A built-in login module.
pub struct LoginModuleFactory {
    /// The name (`[upstream.login] plugin = "<name>"`).
    pub name: &'static str,
    /// Builds the login module.
    pub build: LoginBuildFn,
    /// Validates a configuration text.
    pub check_config: CheckConfigFn,
}

inventory::collect!(LoginModuleFactory);

/// A built-in event subscriber.
pub struct EventSubscriberFactory {
    /// The name (`[[events.subscribers]] plugin = "<name>"`).
    pub name: &'static str,
    /// Builds the subscriber.
    pub build: BuildFn<dyn EventSubscriber>,
    /// Validates a configuration text.
    pub check_config: CheckConfigFn,
}

impl EventSubscriberFactory {
    /// The factory of plugin `T`.
    pub const fn of<T: Plugin + EventSubscriber>() -> Self {
        Self {
            name: T::NAME,
            build: |text, host| Ok(Arc::new(plugin::build::<T>(text, host)?)),
            check_config: check_config::<T::Config>,
        }
    }
}

inventory::collect!(EventSubscriberFactory);

/// Where a metadata store keeps its data.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoreSettings {
    /// The node's data directory.
    pub data_dir: PathBuf,
}

impl StoreSettings {
    /// Creates settings.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
        }
    }
}

/// How a built-in store is opened.
pub type StoreOpenFn = fn(&StoreSettings) -> Result<Arc<dyn MetadataStore>, StoreError>;

/// A built-in metadata store (not a dynamic plugin kind: a node's state is its store, and the
/// store's code must be the host's own).
pub struct StoreFactory {
    /// The store's name.
    pub name: &'static str,
    /// Opens the store (locking it for this process).
    pub open: StoreOpenFn,
}

inventory::collect!(StoreFactory);

/// The name of the embedded store every node uses unless configured otherwise.
pub const DEFAULT_STORE: &str = "file";

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

/// Every built-in principal builder linked into this binary.
pub fn principal_builders() -> impl Iterator<Item = &'static PrincipalBuilderFactory> {
    inventory::iter::<PrincipalBuilderFactory>.into_iter()
}

/// Every built-in login module linked into this binary.
pub fn login_modules() -> impl Iterator<Item = &'static LoginModuleFactory> {
    inventory::iter::<LoginModuleFactory>.into_iter()
}

/// Every built-in event subscriber linked into this binary.
pub fn event_subscribers() -> impl Iterator<Item = &'static EventSubscriberFactory> {
    inventory::iter::<EventSubscriberFactory>.into_iter()
}

/// Every built-in metadata store linked into this binary.
pub fn stores() -> impl Iterator<Item = &'static StoreFactory> {
    inventory::iter::<StoreFactory>.into_iter()
}
