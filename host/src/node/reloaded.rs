//! What a reload builds again of the node's security: the authorizer (with the local security
//! APIs that consult it), the principal builder, the forwarding policy and the upstream login
//! module, chosen by name as at start among the built-ins, the plugins loaded at start and those
//! reloads loaded since.
//!
//! Nothing here replaces what running connections hold: the reload publishes the new instances in
//! the listener's snapshot (`server::live`), new connections and re-authentications take them,
//! and the old ones live on (`Arc`) while a connection still uses them — a plugin's library is
//! never unloaded (`plugin_loader`).
//!
//! The built-in `acl` authorizer is not built again: it replays the ACLs of the store when it is
//! built, and only the start sees the whole log (`MetadataStore::replay_done`). The instance the
//! node started with is kept, following the store all along, so a reload that chooses a plugin
//! and then `acl` again gets it back with every ACL written meanwhile. A node that started with a
//! plugin cannot switch to `acl` live: that needs a restart (the error says so).

use std::sync::Arc;

use portcullis::authorizer::Authorizer;
use portcullis::forwarding::ForwardingPolicy;
use portcullis::local::LocalHandler;
use portcullis::login::LoginModule;
use portcullis::principal::PrincipalBuilder;
use portcullis::registry::{self, PluginInstance};
use portcullis::{PluginError, PluginKind};

use super::choose::{choose, Choice};
use super::error::NodeError;
use super::security::{finish_authorizer, local_handlers};
use super::Node;
use crate::config::Config;
use crate::plugin_config::PluginTables;
use crate::plugin_loader::PluginLoadReport;

/// The authorizer a reloaded configuration publishes, and the local APIs that use it.
pub struct ReloadedSecurity {
    /// What upstream-bound requests are checked with (`None` when the upstream decides).
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// The locally served security APIs, on the new authorizer.
    pub local_handlers: Vec<Arc<dyn LocalHandler>>,
    /// The authorizer itself, also when the upstream authorizes forwarded requests: what the
    /// local security APIs and, in a cluster, the inter-node listener consult.
    pub local_authorizer: Option<Arc<dyn Authorizer>>,
}

impl Node {
    /// The authorizer `config.authorizer.plugin` names, for a reloaded configuration: a plugin's
    /// instance from the newest of `reloaded` (newest first) that provides it, else from the
    /// plugins loaded at start; the built-in one the node started with. Screened by `policy`,
    /// audited and instrumented as at start; `None` without `[authorizer]`.
    ///
    /// # Errors
    /// [`NodeError`] naming `authorizer.plugin` (no such authorizer, with what is available; a
    /// built-in one the node did not start with) or the plugin's table (it refused it).
    pub fn security_for(
        &self,
        config: &Config,
        reloaded: &[&PluginLoadReport],
        policy: &Arc<dyn ForwardingPolicy>,
    ) -> Result<ReloadedSecurity, NodeError> {
        let raw = match &config.authorizer {
            Some(settings) => Some(self.authorizer_named(config, &settings.plugin, reloaded)?),
            None => None,
        };
        let full = finish_authorizer(config, raw, policy, self.audit.as_ref());
        let handlers = local_handlers(
            &self.credentials,
            self.tokens.clone(),
            full.clone(),
            config.delegation_tokens.accept_token_without_extension,
        );
        Ok(ReloadedSecurity {
            authorizer: full
                .clone()
                .filter(|_| !config.forwarding.upstream_authorizes()),
            local_handlers: handlers,
            local_authorizer: full,
        })
    }

    fn authorizer_named(
        &self,
        config: &Config,
        name: &str,
        reloaded: &[&PluginLoadReport],
    ) -> Result<Arc<dyn Authorizer>, NodeError> {
        let tables = PluginTables::new(&config.plugins)?;
        let report = newest_with(reloaded, &self.plugins, PluginKind::Authorizer, name);
        let builtin = registry::authorizers().find(|f| f.name == name);
        let kept = self
            .start_authorizer
            .as_ref()
            .filter(|(started, _)| started == name)
            .map(|(_, a)| Arc::clone(a));
        if builtin.is_some()
            && kept.is_none()
            && report.find(PluginKind::Authorizer, name).is_none()
        {
            return Err(NodeError::BuiltinAuthorizerAtStart {
                name: name.to_owned(),
            });
        }
        choose(
            Choice {
                key: "authorizer.plugin",
                kind: PluginKind::Authorizer,
                name,
            },
            builtin,
            registry::authorizers().map(|f| f.name),
            // Checked above: a built-in one is the instance kept from the start.
            |_| kept.ok_or_else(|| PluginError::startup("not built at start")),
            |instance| match instance {
                PluginInstance::Authorizer(a) => Some(Arc::clone(a)),
                _ => None,
            },
            report,
            &tables,
        )
        .map_err(|e| naming_reloaded(e, reloaded))
    }

    /// The principal builder `config.principal.plugin` names, for a reloaded configuration: a
    /// built-in one built anew (they hold no state), a plugin's instance from the newest of
    /// `reloaded` that provides it, else from the plugins loaded at start.
    ///
    /// # Errors
    /// [`NodeError`] naming `principal.plugin` or the plugin's table.
    pub fn principal_builder_for(
        &self,
        config: &Config,
        reloaded: &[&PluginLoadReport],
    ) -> Result<Arc<dyn PrincipalBuilder>, NodeError> {
        let tables = PluginTables::new(&config.plugins)?;
        let name = config.principal.plugin.as_str();
        let report = newest_with(reloaded, &self.plugins, PluginKind::PrincipalBuilder, name);
        super::assemble::build_principal_builder(config, &self.context, report, &tables)
            .map_err(|e| naming_reloaded(e, reloaded))
    }

    /// The forwarding policy a reloaded configuration chooses, built as at start: a built-in
    /// policy anew with `[forwarding] deny_api_keys`, a plugin's instance from the newest of
    /// `reloaded` that provides it (else from the plugins loaded at start) with the host's deny
    /// list in front of it. An authorizer screened by the policy must be built again on it
    /// ([`Node::security_for`]).
    ///
    /// # Errors
    /// [`NodeError`] as at start: no such policy, a plugin that refused its table.
    pub fn policy_for(
        &self,
        config: &Config,
        reloaded: &[&PluginLoadReport],
    ) -> Result<Arc<dyn ForwardingPolicy>, NodeError> {
        let tables = PluginTables::new(&config.plugins)?;
        let name = config.forwarding.policy.as_str();
        let report = newest_with(reloaded, &self.plugins, PluginKind::ForwardingPolicy, name);
        super::assemble::build_policy(config, &self.context, report, &tables)
            .map_err(|e| naming_reloaded(e, reloaded))
    }
}

impl Node {
    /// The upstream login module a reloaded configuration chooses (`[upstream.login]`, or the
    /// built-in password login with `[upstream]`'s `sasl_mechanism`, `username` and `password`),
    /// built as at start: a plugin's instance from the newest of `reloaded` that provides it,
    /// else from the plugins loaded at start. `None` for an upstream without SASL.
    ///
    /// # Errors
    /// [`NodeError`] as at start: no such module, a table it refuses, a mechanism that is not
    /// `sasl_mechanism`.
    pub fn login_for(
        &self,
        config: &Config,
        reloaded: &[&PluginLoadReport],
    ) -> Result<Option<Arc<dyn LoginModule>>, NodeError> {
        let tables = PluginTables::new(&config.plugins)?;
        let name = config
            .upstream
            .login
            .as_ref()
            .map_or(portcullis_plugin_login::PASSWORD_LOGIN, |l| {
                l.plugin.as_str()
            });
        let report = newest_with(reloaded, &self.plugins, PluginKind::LoginModule, name);
        super::assemble::upstream_login(config, &self.context, report, &tables)
            .map_err(|e| naming_reloaded(e, reloaded))
    }
}

/// `error`, when it says no plugin of that name exists, with the plugins of its kind that
/// reloads loaded among those available (the report it was chosen from is the start's then).
fn naming_reloaded(error: NodeError, reloaded: &[&PluginLoadReport]) -> NodeError {
    match error {
        NodeError::UnknownPlugin {
            key,
            kind,
            name,
            mut available,
            refused,
        } => {
            available.extend(
                (reloaded.iter())
                    .flat_map(|r| r.loaded.iter())
                    .filter(|p| p.kind == kind)
                    .map(|p| p.name.clone()),
            );
            available.sort_unstable();
            available.dedup();
            NodeError::UnknownPlugin {
                key,
                kind,
                name,
                available,
                refused,
            }
        }
        other => other,
    }
}

/// The newest report of `reloaded` with a plugin `name` of `kind`, else `started`.
fn newest_with<'a>(
    reloaded: &[&'a PluginLoadReport],
    started: &'a PluginLoadReport,
    kind: PluginKind,
    name: &str,
) -> &'a PluginLoadReport {
    reloaded
        .iter()
        .copied()
        .find(|r| r.find(kind, name).is_some())
        .unwrap_or(started)
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis::forwarding::ForwardingPolicy;

    fn node_with(authorizer: &str) -> (tempfile::TempDir, Node) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portcullis.toml");
        let text = format!(
            "[node]\nid = 1\ndata_dir = {:?}\n\n[listener]\naddress = \"127.0.0.1:0\"\n\
             advertised_host = \"localhost\"\nbroker_port_base = 9100\n\
             sasl_mechanisms = [\"SCRAM-SHA-512\"]\n\n[upstream]\n\
             bootstrap_servers = [\"127.0.0.1:19092\"]\n\n{authorizer}",
            dir.path().join("data").display().to_string()
        );
        std::fs::write(&path, text).unwrap();
        let node = Node::build(crate::config::load(&path).unwrap()).unwrap();
        (dir, node)
    }

    fn with_authorizer(node: &Node, plugin: &str) -> Config {
        let mut config = node.config.clone();
        if let Some(settings) = config.authorizer.as_mut() {
            settings.plugin = plugin.to_owned();
        }
        config
    }

    fn policy(node: &Node) -> Arc<dyn ForwardingPolicy> {
        Arc::clone(&node.services.policy)
    }

    #[test]
    fn the_acl_authorizer_the_node_started_with_is_chosen_again() {
        let (_dir, node) = node_with("[authorizer]\nsuper_users = [\"User:admin\"]\n");
        let config = with_authorizer(&node, "acl");
        let security = node.security_for(&config, &[], &policy(&node)).unwrap();
        assert!(security.authorizer.is_some());
        assert_eq!(
            security.local_handlers.len(),
            node.services.local_handlers.len()
        );
    }

    #[test]
    fn an_unknown_authorizer_or_principal_builder_is_refused_naming_the_key() {
        let (_dir, node) = node_with("[authorizer]\n");
        let config = with_authorizer(&node, "no-such-authorizer");
        let error = node
            .security_for(&config, &[], &policy(&node))
            .err()
            .unwrap()
            .to_string();
        assert!(error.starts_with("authorizer.plugin:"), "{error}");
        assert!(
            error.contains("no-such-authorizer") && error.contains("acl"),
            "{error}"
        );

        let mut config = node.config.clone();
        config.principal.plugin = "no-such-builder".to_owned();
        let error = node
            .principal_builder_for(&config, &[])
            .err()
            .unwrap()
            .to_string();
        assert!(error.starts_with("principal.plugin:"), "{error}");
        config.principal.plugin = "default".to_owned();
        assert!(node.principal_builder_for(&config, &[]).is_ok());
    }

    #[test]
    fn without_an_authorizer_at_start_acl_is_not_built_by_a_reload() {
        // A node that did not start with `acl` has no instance of it to give back.
        let (_dir, node) = node_with("");
        let mut config = node.config.clone();
        config.authorizer = Some(toml::from_str("").unwrap());
        let error = node
            .security_for(&config, &[], &policy(&node))
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.starts_with(
                "authorizer.plugin: the built-in authorizer `acl` can only be chosen at start"
            ),
            "{error}"
        );
    }
}
