//! The built-in plugins, and the check that every `[plugins.config.NAME]` table belongs to a
//! plugin and fits it.

use portcullis::registry::{self, CheckConfigFn};
use portcullis::{PluginError, PluginKind};

use super::choose::refused_files;
use super::error::NodeError;
use super::oauth::{oauth_table_check, OAUTHBEARER};
use crate::plugin_config::PluginTables;
use crate::plugin_loader::PluginLoadReport;

/// Every built-in plugin: its kind, name and configuration check.
pub fn builtins() -> Vec<(PluginKind, &'static str, CheckConfigFn)> {
    let mut all: Vec<(PluginKind, &'static str, CheckConfigFn)> = Vec::new();
    all.extend(registry::mechanisms().map(|f| (PluginKind::SaslMechanism, f.name, f.check_config)));
    // OAUTHBEARER is built by the host from `[oauthbearer]` (its validator needs host I/O), not
    // from a registered factory.
    if !all.iter().any(|(_, name, _)| *name == OAUTHBEARER) {
        all.push((PluginKind::SaslMechanism, OAUTHBEARER, oauth_table_check));
    }
    all.extend(registry::authorizers().map(|f| (PluginKind::Authorizer, f.name, f.check_config)));
    all.extend(
        registry::principal_builders()
            .map(|f| (PluginKind::PrincipalBuilder, f.name, f.check_config)),
    );
    all.extend(
        registry::login_modules().map(|f| (PluginKind::LoginModule, f.name, f.check_config)),
    );
    all.extend(
        registry::policies().map(|f| (PluginKind::ForwardingPolicy, f.name, f.check_config)),
    );
    all.extend(
        registry::event_subscribers()
            .map(|f| (PluginKind::EventSubscriber, f.name, f.check_config)),
    );
    all.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    all
}

/// Every `[plugins.config.NAME]` table must belong to a plugin and fit it: a typo in a table name
/// or a key is refused at start-up, even for a plugin that is not in use.
pub(super) fn check_tables(
    tables: &PluginTables,
    plugins: &PluginLoadReport,
) -> Result<(), NodeError> {
    let builtins = builtins();
    for name in tables.names() {
        let mut known = false;
        for plugin in plugins.loaded.iter().filter(|p| p.name == name) {
            known = true;
            if let Err(error) = &plugin.instance {
                return Err(NodeError::PluginConfig(error.clone()));
            }
        }
        for (_, _, check) in builtins.iter().filter(|(_, n, _)| *n == name) {
            known = true;
            check(tables.text(name)).map_err(|e| {
                NodeError::PluginConfig(tables.locate(name, &PluginError::Config(e)))
            })?;
        }
        if !known {
            let mut available: Vec<String> = builtins
                .iter()
                .map(|(_, n, _)| (*n).to_owned())
                .chain(plugins.loaded.iter().map(|p| p.name.clone()))
                .collect();
            available.sort_unstable();
            available.dedup();
            return Err(NodeError::UnknownConfigTable {
                name: name.to_owned(),
                available,
                refused: refused_files(plugins),
            });
        }
    }
    // Limits for a component that is not there would silently protect nothing.
    let components: Vec<String> = plugins
        .loaded
        .iter()
        .filter(|p| portcullis_plugin_wasm::plugin_name(&p.path).is_some())
        .map(|p| p.name.clone())
        .collect();
    if let Some(name) = tables
        .wasm_names()
        .find(|n| !components.iter().any(|c| c == n))
    {
        return Err(NodeError::UnknownWasmTable {
            name: name.to_owned(),
            available: components,
            refused: refused_files(plugins),
        });
    }
    Ok(())
}

/// The names of the built-in mechanisms, sorted.
pub fn builtin_mechanism_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = registry::mechanisms().map(|f| f.name).collect();
    names.push(OAUTHBEARER);
    names.sort_unstable();
    names.dedup();
    names
}
