//! Choosing a plugin by name: a built-in one or one loaded from the plugin directory, never
//! both, and what to say when none of that name exists.

use std::sync::Arc;

use portcullis::registry::{self, PluginInstance};
use portcullis::{PluginError, PluginKind};

use super::error::NodeError;
use crate::plugin_config::PluginTables;
use crate::plugin_loader::PluginLoadReport;

/// What a configuration key chooses.
#[derive(Clone, Copy)]
pub(super) struct Choice<'a> {
    pub(super) key: &'static str,
    pub(super) kind: PluginKind,
    pub(super) name: &'a str,
}

/// Chooses the plugin `choice` names: a built-in one (built with `build`) or a loaded one (its
/// instance, through `instance`), never both.
pub(super) fn choose<T: ?Sized, F>(
    choice: Choice<'_>,
    builtin: Option<&'static F>,
    builtin_names: impl Iterator<Item = &'static str>,
    build: impl FnOnce(&'static F) -> Result<Arc<T>, PluginError>,
    instance: impl Fn(&PluginInstance) -> Option<Arc<T>>,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<Arc<T>, NodeError> {
    let loaded = plugins.find(choice.kind, choice.name);
    match (builtin, loaded) {
        (Some(_), Some(plugin)) => Err(NodeError::DuplicatePlugin {
            key: choice.key,
            kind: choice.kind,
            name: choice.name.to_owned(),
            file: plugin.path.clone(),
        }),
        (Some(factory), None) => {
            build(factory).map_err(|e| NodeError::PluginConfig(tables.locate(choice.name, &e)))
        }
        (None, Some(plugin)) => match &plugin.instance {
            Ok(built) => instance(built).ok_or_else(|| unknown(choice, builtin_names, plugins)),
            Err(error) => Err(NodeError::PluginConfig(error.clone())),
        },
        (None, None) => Err(unknown(choice, builtin_names, plugins)),
    }
}

pub(super) fn refused_files(plugins: &PluginLoadReport) -> Vec<String> {
    plugins
        .refused
        .iter()
        .map(|r| format!("{}: {}", r.path.display(), r.reason))
        .collect()
}

pub(super) fn unknown(
    choice: Choice<'_>,
    builtin_names: impl Iterator<Item = &'static str>,
    plugins: &PluginLoadReport,
) -> NodeError {
    let mut available: Vec<String> = builtin_names
        .map(str::to_owned)
        .chain(
            plugins
                .loaded
                .iter()
                .filter(|p| p.kind == choice.kind)
                .map(|p| p.name.clone()),
        )
        .collect();
    available.sort_unstable();
    available.dedup();
    NodeError::UnknownPlugin {
        key: choice.key,
        kind: choice.kind,
        name: choice.name.to_owned(),
        available,
        refused: refused_files(plugins),
    }
}

/// Without a store, an authorizer is not built; this checks that the configured one exists and,
/// for a loaded plugin, that it started.
pub(super) fn check_authorizer(
    name: &str,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
) -> Result<(), NodeError> {
    let choice = Choice {
        key: "authorizer.plugin",
        kind: PluginKind::Authorizer,
        name,
    };
    let builtin = registry::authorizers().find(|f| f.name == name);
    match (builtin, plugins.find(PluginKind::Authorizer, name)) {
        (Some(_), Some(plugin)) => Err(NodeError::DuplicatePlugin {
            key: choice.key,
            kind: choice.kind,
            name: name.to_owned(),
            file: plugin.path.clone(),
        }),
        (Some(factory), None) => (factory.check_config)(tables.text(name))
            .map_err(|e| NodeError::PluginConfig(tables.locate(name, &PluginError::Config(e)))),
        (None, Some(plugin)) => match &plugin.instance {
            Ok(_) => Ok(()),
            Err(error) => Err(NodeError::PluginConfig(error.clone())),
        },
        (None, None) => Err(unknown(
            choice,
            registry::authorizers().map(|f| f.name),
            plugins,
        )),
    }
}
