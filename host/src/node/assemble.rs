//! The parts of a node that need no store ([`Assembly`]): the plugin directory, the mechanisms,
//! principal builder, forwarding policy, upstream login and event subscribers.

use std::sync::Arc;

use portcullis::events::EventSubscriber;
use portcullis::forwarding::{DenyApiKeys, ForwardingPolicy};
use portcullis::login::LoginModule;
use portcullis::principal::PrincipalBuilder;
use portcullis::registry::{self, ForwardingSettings, LoginSettings, PluginInstance};
use portcullis::sasl::SaslMechanism;
use portcullis::PluginKind;
use portcullis_plugin_login::ResolvedLogin;

use super::builtins::check_tables;
use super::choose::{check_authorizer, choose, Choice};
use super::error::NodeError;
use super::mechanisms::resolve_mechanisms;
use super::oauth::oauth_enabled;
use crate::config::Config;
use crate::plugin_config::PluginTables;
use crate::plugin_loader::PluginLoadReport;
use crate::services::HostContext;
use crate::wasm_plugins::load_plugin_dir;

/// The parts of a node that need no store.
pub struct Assembly {
    /// The enabled mechanisms, in `listener.sasl_mechanisms` order.
    pub mechanisms: Vec<Arc<dyn SaslMechanism>>,
    /// Maps an authentication to a principal.
    pub principal_builder: Arc<dyn PrincipalBuilder>,
    /// Routes authenticated requests.
    pub policy: Arc<dyn ForwardingPolicy>,
    /// Portcullis' own login upstream, for SASL upstreams.
    pub upstream_login: Option<Arc<dyn LoginModule>>,
    /// The event subscribers, with their queue capacities (started by `Node::build`).
    pub subscribers: Vec<(String, Arc<dyn EventSubscriber>, usize)>,
    /// What the plugin directory held.
    pub plugins: PluginLoadReport,
    /// The configuration tables.
    pub tables: PluginTables,
}

/// Loads the plugin directory and builds the mechanisms, principal builder, policy, upstream
/// login and event subscribers for `config` with the services of `context`; checks every
/// `[plugins.config.NAME]` table and that the configured authorizer exists.
///
/// # Errors
/// [`NodeError`] for an unknown or doubly provided plugin or mechanism, a plugin that refused its
/// configuration, or a configuration table that names no plugin.
pub fn assemble(config: &Config, context: &HostContext) -> Result<Assembly, NodeError> {
    // No I/O here: OAUTHBEARER is built with a validator that fetches nothing.
    let offline = match &config.oauthbearer {
        Some(section) if oauth_enabled(config) => {
            Some(crate::oauth::OAuthBearer::offline(section)?)
        }
        _ => None,
    };
    assemble_with(config, context, offline.as_ref())
}

/// [`assemble`] with OAUTHBEARER already built (started, by `Node::build`).
pub(super) fn assemble_with(
    config: &Config,
    context: &HostContext,
    oauth: Option<&crate::oauth::OAuthBearer>,
) -> Result<Assembly, NodeError> {
    let tables = PluginTables::new(&config.plugins)?;
    let plugins = match &config.plugins.dir {
        Some(dir) => load_plugin_dir(dir, &tables, context),
        None => PluginLoadReport::default(),
    };
    check_tables(&tables, &plugins)?;
    let mechanisms = resolve_mechanisms(
        &config.listener.sasl_mechanisms,
        context,
        &plugins,
        &tables,
        oauth.map(crate::oauth::OAuthBearer::mechanism),
    )?;
    let principal_builder = build_principal_builder(config, context, &plugins, &tables)?;
    let policy = build_policy(config, context, &plugins, &tables)?;
    let upstream_login = upstream_login(config, context, &plugins, &tables)?;
    let subscribers = build_subscribers(config, context, &plugins, &tables)?;
    if let Some(settings) = &config.authorizer {
        check_authorizer(&settings.plugin, &plugins, &tables)?;
    }
    Ok(Assembly {
        mechanisms,
        principal_builder,
        policy,
        upstream_login,
        subscribers,
        plugins,
        tables,
    })
}

pub(super) fn build_principal_builder(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Arc<dyn PrincipalBuilder>, NodeError> {
    let name = config.principal.plugin.as_str();
    choose(
        Choice {
            key: "principal.plugin",
            kind: PluginKind::PrincipalBuilder,
            name,
        },
        registry::principal_builders().find(|f| f.name == name),
        registry::principal_builders().map(|f| f.name),
        |factory| (factory.build)(tables.text(name), &context.host_for(name)),
        |instance| match instance {
            PluginInstance::PrincipalBuilder(p) => Some(Arc::clone(p)),
            _ => None,
        },
        plugins,
        tables,
    )
}

/// The forwarding policy `config` chooses, with its `deny_api_keys` (also for a reload, which
/// may change the list but not the policy).
pub(super) fn build_policy(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Arc<dyn ForwardingPolicy>, NodeError> {
    let name = config.forwarding.policy.as_str();
    let deny = &config.forwarding.deny_api_keys;
    let builtin = registry::policies().find(|f| f.name == name);
    let policy = choose(
        Choice {
            key: "forwarding.policy",
            kind: PluginKind::ForwardingPolicy,
            name,
        },
        builtin,
        registry::policies().map(|f| f.name),
        |factory| {
            // `delegated` is configured in `[forwarding.delegated]`, not a `[plugins.*]` table.
            let delegated_text;
            let text = if factory.name == "delegated" {
                delegated_text = crate::delegated_config::DelegatedConfig(
                    config
                        .forwarding
                        .delegated_settings()
                        .cloned()
                        .unwrap_or_default(),
                )
                .policy_text();
                delegated_text.as_str()
            } else {
                tables.text(name)
            };
            (factory.build)(
                text,
                &context.host_for(name),
                &ForwardingSettings::new(deny.clone()),
            )
        },
        |instance| match instance {
            PluginInstance::ForwardingPolicy(p) => Some(Arc::clone(p)),
            _ => None,
        },
        plugins,
        tables,
    )?;
    // A built-in policy applies `deny_api_keys` itself; in front of a plugin, the host does.
    if builtin.is_none() && !deny.is_empty() {
        return Ok(Arc::new(DenyApiKeys::new(deny.clone(), policy)));
    }
    Ok(policy)
}

/// The login module for SASL upstreams (`None` for a PLAINTEXT upstream), wrapped so that a
/// module handing over a password gets the host's built-in client for its mechanism.
pub(super) fn upstream_login(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Option<Arc<dyn LoginModule>>, NodeError> {
    let upstream = &config.upstream;
    if !upstream.security_protocol.uses_sasl() {
        return Ok(None);
    }
    let name = upstream
        .login
        .as_ref()
        .map_or(portcullis_plugin_login::PASSWORD_LOGIN, |l| {
            l.plugin.as_str()
        });
    let settings = LoginSettings::new(
        upstream.sasl_mechanism.clone(),
        upstream.username.clone(),
        upstream.password.clone(),
    );
    let module = choose(
        Choice {
            key: "upstream.login.plugin",
            kind: PluginKind::LoginModule,
            name,
        },
        registry::login_modules().find(|f| f.name == name),
        registry::login_modules().map(|f| f.name),
        |factory| (factory.build)(tables.text(name), &context.host_for(name), &settings),
        |instance| match instance {
            PluginInstance::LoginModule(l) => Some(Arc::clone(l)),
            _ => None,
        },
        plugins,
        tables,
    )?;
    // With its own login module, `sasl_mechanism` is optional; when given, it must agree.
    if let Some(configured) = upstream.sasl_mechanism.as_deref() {
        if name != portcullis_plugin_login::PASSWORD_LOGIN && configured != module.mechanism() {
            return Err(NodeError::UpstreamMechanismMismatch {
                configured: configured.to_owned(),
                module: name.to_owned(),
                mechanism: module.mechanism().to_owned(),
            });
        }
    }
    Ok(Some(Arc::new(ResolvedLogin::new(module))))
}

/// Event subscribers by plugin name, with their queue capacities.
pub type Subscribers = Vec<(String, Arc<dyn EventSubscriber>, usize)>;

fn build_subscribers(
    config: &Config,
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Subscribers, NodeError> {
    build_subscribers_from(config, context, &[plugins], tables)
}

/// The configured subscribers, each a loaded plugin's instance from the first of `reports` that
/// has one of its name (a reload passes its own first), or a built-in one built now.
pub(super) fn build_subscribers_from(
    config: &Config,
    context: &HostContext,
    reports: &[&PluginLoadReport],
    tables: &PluginTables,
) -> Result<Subscribers, NodeError> {
    let empty = PluginLoadReport::default();
    config
        .events
        .subscribers
        .iter()
        .map(|subscriber| {
            let name = subscriber.plugin.as_str();
            let plugins = reports
                .iter()
                .copied()
                .find(|r| r.find(PluginKind::EventSubscriber, name).is_some())
                .or(reports.last().copied())
                .unwrap_or(&empty);
            let built = choose(
                Choice {
                    key: "events.subscribers.plugin",
                    kind: PluginKind::EventSubscriber,
                    name,
                },
                registry::event_subscribers().find(|f| f.name == name),
                registry::event_subscribers().map(|f| f.name),
                |factory| (factory.build)(tables.text(name), &context.host_for(name)),
                |instance| match instance {
                    PluginInstance::EventSubscriber(s) => Some(Arc::clone(s)),
                    _ => None,
                },
                plugins,
                tables,
            )?;
            Ok((name.to_owned(), built, subscriber.queue_capacity))
        })
        .collect()
}
