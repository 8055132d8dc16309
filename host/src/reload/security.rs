//! The authorizer and principal builder at a reload: built again when the reload chooses another
//! one (`authorizer.plugin`, `principal.plugin`) or loaded a new instance of the one chosen (its
//! library's content or its `[plugins.config.NAME]` table changed); otherwise the running ones
//! are kept. What is built goes into the snapshot the reload publishes, so new connections and
//! each session's next re-authentication use it; a connection holds the `Arc`s of the snapshot
//! it took, so an instance is dropped only after its last user.
//!
//! On a node of a cluster neither changes live (see `diff`): this is not called there.

use portcullis::connection::NodeServices;
use portcullis::PluginKind;

use super::diff::Change;
use super::Refusal;
use crate::config::Config;
use crate::node::Node;
use crate::plugin_loader::PluginLoadReport;

/// The plugin kinds a reload creates anew when their table changes, on a node of its own or of a
/// cluster.
pub(super) fn renewable(cluster: bool) -> &'static [PluginKind] {
    if cluster {
        &[PluginKind::SaslMechanism, PluginKind::EventSubscriber]
    } else {
        &[
            PluginKind::SaslMechanism,
            PluginKind::Authorizer,
            PluginKind::PrincipalBuilder,
            PluginKind::EventSubscriber,
        ]
    }
}

/// Builds the authorizer (with the local security APIs on it) and the principal builder `new`
/// chooses into `services`, when the choice changed or `this_reload` (the libraries this reload
/// loaded) has a new instance of the one chosen; `reloaded` are the reloads' plugins, newest
/// first.
///
/// # Errors
/// [`Refusal::Security`]: no such plugin, a plugin that refused its table, a built-in
/// authorizer the node did not start with. Nothing was changed then.
pub(super) fn renew(
    node: &Node,
    new: &Config,
    changes: &[Change],
    this_reload: &PluginLoadReport,
    reloaded: &[&PluginLoadReport],
    services: &mut NodeServices,
) -> Result<(), Refusal> {
    let changed = |key: &str| changes.iter().any(|c| c.key == key);
    let authorizer_renewed = new.authorizer.as_ref().is_some_and(|settings| {
        changed("authorizer.plugin")
            || this_reload
                .find(PluginKind::Authorizer, &settings.plugin)
                .is_some()
    });
    let principal = new.principal.plugin.as_str();
    let principal_renewed = changed("principal.plugin")
        || this_reload
            .find(PluginKind::PrincipalBuilder, principal)
            .is_some();
    // Both are built before either is published: an error leaves `services` as it was.
    let security = if authorizer_renewed {
        Some(
            node.security_for(new, reloaded, &services.policy)
                .map_err(Refusal::Security)?,
        )
    } else {
        None
    };
    let builder = if principal_renewed {
        Some(
            node.principal_builder_for(new, reloaded)
                .map_err(Refusal::Security)?,
        )
    } else {
        None
    };
    if let Some(security) = security {
        services.authorizer = security.authorizer;
        services.local_handlers = security.local_handlers;
    }
    if let Some(builder) = builder {
        services.principal_builder = builder;
    }
    Ok(())
}
