//! The SASL mechanisms `listener.sasl_mechanisms` enables, each resolved to a built-in or a
//! loaded plugin's mechanism (OAUTHBEARER: the one the host built).

use std::path::Path;
use std::sync::Arc;

use portcullis::registry::{self, PluginInstance};
use portcullis::sasl::SaslMechanism;
use portcullis::PluginKind;

use super::builtins::builtin_mechanism_names;
use super::error::NodeError;
use super::oauth::OAUTHBEARER;
use crate::plugin_config::PluginTables;
use crate::plugin_loader::PluginLoadReport;
use crate::services::HostContext;

/// Resolves each enabled name to a built-in mechanism or a loaded plugin's mechanism;
/// OAUTHBEARER is `oauth`, the one the host built.
pub(super) fn resolve_mechanisms(
    enabled: &[String],
    context: &HostContext,
    plugins: &PluginLoadReport,
    tables: &PluginTables,
    oauth: Option<Arc<dyn SaslMechanism>>,
) -> Result<Vec<Arc<dyn SaslMechanism>>, NodeError> {
    let loaded: Vec<(&Path, Arc<dyn SaslMechanism>)> = plugins
        .loaded
        .iter()
        .filter_map(|p| match &p.instance {
            Ok(PluginInstance::SaslMechanism(m)) => Some((p.path.as_path(), Arc::clone(m))),
            _ => None,
        })
        .collect();
    enabled
        .iter()
        .map(|name| {
            let mut providers = loaded.iter().filter(|(_, m)| m.name() == name);
            if name == OAUTHBEARER {
                return match (providers.next(), &oauth) {
                    (Some((path, _)), _) => {
                        Err(duplicate(name, "the built-in mechanism".to_owned(), path))
                    }
                    (None, Some(mechanism)) => Ok(Arc::clone(mechanism)),
                    // Config::validate refuses OAUTHBEARER without [oauthbearer].
                    (None, None) => Err(NodeError::OAuthBearer(crate::oauth::OAuthError::Config {
                        key: "listener.sasl_mechanisms".to_owned(),
                        reason: "OAUTHBEARER needs an [oauthbearer] table".to_owned(),
                    })),
                };
            }
            let builtin = registry::mechanisms().find(|f| f.name == name);
            match (builtin, providers.next()) {
                (Some(_), Some((path, _))) => {
                    Err(duplicate(name, "the built-in mechanism".to_owned(), path))
                }
                (None, Some((path, mechanism))) => match providers.next() {
                    Some((other, _)) => {
                        Err(duplicate(name, format!("plugin {}", path.display()), other))
                    }
                    None => Ok(Arc::clone(mechanism)),
                },
                (Some(factory), None) => {
                    (factory.build)(tables.text(name), &context.host_for(name))
                        .map_err(|e| NodeError::PluginConfig(tables.locate(name, &e)))
                }
                (None, None) => Err(unknown_mechanism(name, &loaded, plugins)),
            }
        })
        .collect()
}

fn duplicate(name: &str, first: String, second: &Path) -> NodeError {
    NodeError::DuplicateMechanism {
        name: name.to_owned(),
        first,
        second: format!("plugin {}", second.display()),
    }
}

fn unknown_mechanism(
    name: &str,
    loaded: &[(&Path, Arc<dyn SaslMechanism>)],
    plugins: &PluginLoadReport,
) -> NodeError {
    let mut available: Vec<String> = builtin_mechanism_names()
        .into_iter()
        .map(str::to_owned)
        .chain(loaded.iter().map(|(_, m)| m.name().to_owned()))
        .collect();
    available.sort_unstable();
    available.dedup();
    NodeError::UnknownMechanism {
        name: name.to_owned(),
        available,
        refused: plugins
            .refused
            .iter()
            .map(|r| format!("{}: {}", r.path.display(), r.reason))
            .chain(
                plugins
                    .loaded
                    .iter()
                    .filter(|p| p.kind == PluginKind::SaslMechanism)
                    .filter_map(|p| p.instance.as_ref().err())
                    .map(ToString::to_string),
            )
            .collect(),
    }
}
