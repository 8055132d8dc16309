//! The forwarding policy, the authorizer and the principal builder at a reload: built again when
//! the reload chooses another one (`forwarding.policy`, `authorizer.plugin`, `principal.plugin`)
//! or loaded a new instance of the one chosen (its library's content or its `[plugins.config.NAME]`
//! table changed); otherwise the running ones are kept. A new policy (or a new deny list) builds
//! the authorizer again too, since the authorizer connections use is screened by the policy. What
//! is built goes into the snapshot the reload publishes, so new connections and each session's
//! next re-authentication use it; a connection holds the `Arc`s of the snapshot it took, so an
//! instance is dropped only after its last user.
//!
//! On a node of a cluster the inter-node listener and the mutations this node runs as the
//! cluster's writer take the new authorizer (with its local security APIs) and principal builder
//! too ([`Deciders`]): a peer connection or mutation under way keeps what it started with.

use std::sync::Arc;

use portcullis::connection::NodeServices;
use portcullis::PluginKind;

use super::diff::Change;
use super::Refusal;
use crate::cluster::Deciders;
use crate::config::Config;
use crate::node::Node;
use crate::plugin_loader::PluginLoadReport;

/// The plugin kinds a reload creates anew when their table changes.
pub(super) const RENEWABLE: &[PluginKind] = &[
    PluginKind::SaslMechanism,
    PluginKind::Authorizer,
    PluginKind::PrincipalBuilder,
    PluginKind::ForwardingPolicy,
    PluginKind::EventSubscriber,
    PluginKind::LoginModule,
];

/// Builds the forwarding policy, the authorizer (with the local security APIs on it) and the
/// principal builder `new` chooses into `services`, when the choice changed or `this_reload` (the
/// libraries this reload loaded) has a new instance of the one chosen; `reloaded` are the reloads'
/// plugins, newest first. On a node of a cluster, `deciders` (its cluster part's) get the same.
///
/// # Errors
/// [`Refusal::Policy`] or [`Refusal::Security`]: no such plugin, a plugin that refused its
/// table, a built-in authorizer the node did not start with; [`Refusal::Screening`]: on a node
/// without `[authorizer]`, a policy that starts or stops screening requests. Nothing was changed
/// then.
pub(super) fn renew(
    node: &Node,
    new: &Config,
    changes: &[Change],
    this_reload: &PluginLoadReport,
    reloaded: &[&PluginLoadReport],
    services: &mut NodeServices,
    deciders: Option<&mut Deciders>,
) -> Result<(), Refusal> {
    let changed = |key: &str| changes.iter().any(|c| c.key == key);
    let policy_renewed = changed("forwarding.policy")
        || changed("forwarding.deny_api_keys")
        || this_reload
            .find(PluginKind::ForwardingPolicy, &new.forwarding.policy)
            .is_some();
    // Built before anything is published: an error leaves `services` as it was.
    let policy = if policy_renewed {
        Some(node.policy_for(new, reloaded).map_err(Refusal::Policy)?)
    } else {
        None
    };
    // The authorizer is screened by the policy (when the policy screens actions), so a new
    // policy builds it again, with or without `[authorizer]`.
    let authorizer_renewed = policy_renewed
        || new.authorizer.as_ref().is_some_and(|settings| {
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
    let security = if authorizer_renewed {
        let screen = policy.as_ref().unwrap_or(&services.policy);
        let security = node
            .security_for(new, reloaded, screen)
            .map_err(Refusal::Security)?;
        // Without `[authorizer]`, only a screening policy makes requests authorized; a change of
        // that changes the advertised API versions (see `Refusal::Screening`).
        if security.authorizer.is_some() != services.authorizer.is_some() {
            return Err(Refusal::Screening {
                screens: security.authorizer.is_some(),
            });
        }
        Some(security)
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
    if let Some(policy) = policy {
        services.policy = policy;
    }
    if let Some(deciders) = deciders {
        if let Some(security) = &security {
            deciders.handlers.clone_from(&security.local_handlers);
            deciders.authorizer.clone_from(&security.local_authorizer);
        }
        if let Some(builder) = &builder {
            deciders.principal_builder = Arc::clone(builder);
        }
    }
    if let Some(security) = security {
        services.authorizer = security.authorizer;
        services.local_handlers = security.local_handlers;
    }
    if let Some(builder) = builder {
        services.principal_builder = builder;
    }
    Ok(())
}
