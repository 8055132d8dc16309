//! Loading the WASM components (`*.wasm`) of the plugin directory, next to the native libraries
//! (`plugin_loader`): each is compiled, its kind read from its exports, and its plugin created
//! with its `[plugins.config.NAME]` text and `[plugins.wasm.NAME]` limits, where NAME is the file
//! name without `.wasm`. Components are sandboxed (`portcullis_plugin_wasm`): unlike a native
//! library, loading one runs no code with the gateway's privileges.

use std::path::{Path, PathBuf};

use portcullis::registry::PluginInstance;
use portcullis::PluginKind;
use portcullis_plugin_wasm::{load_component, WasmError, WasmKind, WasmPlugin, WasmRuntime};

use crate::plugin_config::{PluginConfigError, PluginTables};
use crate::plugin_loader::{LoadedPlugin, PluginLoadReport, RefusalReason, RefusedPlugin};
use crate::services::HostContext;

/// What a node loads from its plugin directory: every native library
/// ([`crate::plugin_loader::load_plugin_dir`]), then every component, into one report (names must
/// be unique across libraries and components).
pub fn load_plugin_dir(
    dir: &Path,
    tables: &PluginTables,
    context: &HostContext,
) -> PluginLoadReport {
    let mut report = crate::plugin_loader::load_plugin_dir(dir, tables, context);
    load_components(dir, tables, context, &mut report);
    report
}

/// Loads every component of `dir` into `report` (names must be unique across libraries and
/// components).
pub(crate) fn load_components(
    dir: &Path,
    tables: &PluginTables,
    context: &HostContext,
    report: &mut PluginLoadReport,
) {
    match component_files(dir) {
        Ok(files) => load_component_files(dir, &files, tables, context, report),
        Err(error) => report.refused.push(RefusedPlugin {
            path: dir.to_owned(),
            reason: RefusalReason::ReadDir(error),
        }),
    }
}

/// Loads the components `files` of the plugin directory `dir` into `report` (a reload passes
/// the new and changed ones). Unlike a native library, a component needs no private copy: its
/// bytes are read once and compiled, so a file replaced later changes nothing that runs.
pub(crate) fn load_component_files(
    dir: &Path,
    files: &[PathBuf],
    tables: &PluginTables,
    context: &HostContext,
    report: &mut PluginLoadReport,
) {
    if files.is_empty() {
        return;
    }
    let runtime = match WasmRuntime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            refuse(report, dir.to_owned(), RefusalReason::Wasm(error));
            return;
        }
    };
    for path in files {
        load_one(&runtime, path.clone(), tables, context, report);
    }
}

fn load_one(
    runtime: &WasmRuntime,
    path: PathBuf,
    tables: &PluginTables,
    context: &HostContext,
    report: &mut PluginLoadReport,
) {
    let Some(name) = portcullis_plugin_wasm::plugin_name(&path).map(str::to_owned) else {
        return;
    };
    if let Some(first) = report.loaded.iter().find(|p| p.name == name) {
        let reason = RefusalReason::DuplicatePlugin {
            kind: first.kind,
            name,
            first: first.path.clone(),
        };
        refuse(report, path, reason);
        return;
    }
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(source) => {
            let reason = RefusalReason::Wasm(WasmError::Read {
                path: path.clone(),
                source,
            });
            refuse(report, path, reason);
            return;
        }
    };
    let limits = tables.wasm_limits(&name);
    let host = context.host_for(&name);
    let loaded = load_component(
        runtime,
        &path,
        &bytes,
        &name,
        tables.text(&name),
        &limits,
        host,
    );
    let (kind, instance) = match loaded {
        Ok(loaded) => match loaded.plugin {
            WasmPlugin::Authorizer(a) => {
                (PluginKind::Authorizer, Ok(PluginInstance::Authorizer(a)))
            }
            WasmPlugin::SaslMechanism(m) => (
                PluginKind::SaslMechanism,
                Ok(PluginInstance::SaslMechanism(m)),
            ),
            WasmPlugin::PrincipalBuilder(b) => (
                PluginKind::PrincipalBuilder,
                Ok(PluginInstance::PrincipalBuilder(b)),
            ),
            WasmPlugin::EventSubscriber(s) => (
                PluginKind::EventSubscriber,
                Ok(PluginInstance::EventSubscriber(s)),
            ),
            other => {
                let message = format!("unsupported kind {other:?}");
                (
                    PluginKind::Authorizer,
                    Err(PluginConfigError::other(&name, message)),
                )
            }
        },
        // The component refused its table: listed like a native plugin that did, which stops
        // the start when it is used or has a table.
        Err(WasmError::Refused { kind, message, .. }) => {
            let kind = match kind {
                WasmKind::SaslMechanism => PluginKind::SaslMechanism,
                WasmKind::PrincipalBuilder => PluginKind::PrincipalBuilder,
                WasmKind::EventSubscriber => PluginKind::EventSubscriber,
                _ => PluginKind::Authorizer,
            };
            (kind, Err(PluginConfigError::other(&name, message)))
        }
        Err(error) => {
            refuse(report, path, RefusalReason::Wasm(error));
            return;
        }
    };
    match &instance {
        Ok(_) => {
            tracing::info!(path = %path.display(), plugin = %name, kind = %kind, "loaded wasm plugin")
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), "wasm plugin refused to start: {error}")
        }
    }
    report.loaded.push(LoadedPlugin {
        path,
        name,
        kind,
        // The API it was built against, as `portcullis plugins` shows it.
        api_version: format!("wit {}", portcullis_plugin_wasm::WIT_PACKAGE),
        instance,
        warnings: Vec::new(),
    });
}

fn refuse(report: &mut PluginLoadReport, path: PathBuf, reason: RefusalReason) {
    let refused = RefusedPlugin { path, reason };
    tracing::warn!("{refused}");
    report.refused.push(refused);
}

/// The `*.wasm` files of `dir`, sorted (a missing directory has none).
pub(crate) fn component_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if portcullis_plugin_wasm::plugin_name(&path).is_some() && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
