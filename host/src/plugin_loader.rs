//! Loading native plugins: every shared library in the plugin directory is opened, its
//! declaration checked (`portcullis::abi::validate_declaration`), and each plugin it exports
//! created with its configuration and its host services. A library that fails a check is
//! refused — reported with its path and the reason — and the host keeps starting with the
//! others; a plugin that refuses its configuration is listed with the error, which stops the
//! node when the plugin is used or was given a configuration table (see `node.rs`).
//!
//! Native plugins are trusted code: opening a library runs its initialisers before any check,
//! and nothing sandboxes it afterwards. Libraries are never unloaded (see `open_forever` for why).

use std::fmt;
use std::path::{Path, PathBuf};

use portcullis::abi::{
    export_services, validate_declaration, AbiError, AbiWarning, CreateError, PluginDeclaration,
    PluginKind, DECLARATION_SYMBOL,
};
use portcullis::registry::PluginInstance;

use crate::plugin_config::{PluginConfigError, PluginTables};
use crate::services::HostContext;

/// What loading a plugin directory produced.
#[derive(Debug, Default)]
pub struct PluginLoadReport {
    /// Every plugin of every library that passed the checks, in file name and declaration order
    /// (including plugins that refused their configuration).
    pub loaded: Vec<LoadedPlugin>,
    /// Files (or single plugins) that were refused, in file name order.
    pub refused: Vec<RefusedPlugin>,
}

impl PluginLoadReport {
    /// The loaded plugin named `name` of `kind`, if any.
    pub fn find(&self, kind: PluginKind, name: &str) -> Option<&LoadedPlugin> {
        self.loaded
            .iter()
            .find(|p| p.kind == kind && p.name == name)
    }

    /// The names of the SASL mechanisms its plugins provide (those that started).
    pub fn mechanism_names(&self) -> Vec<String> {
        self.loaded
            .iter()
            .filter_map(|p| match &p.instance {
                Ok(PluginInstance::SaslMechanism(m)) => Some(m.name().to_owned()),
                _ => None,
            })
            .collect()
    }
}

/// One plugin of a loaded library.
pub struct LoadedPlugin {
    /// The library file.
    pub path: PathBuf,
    /// The plugin's name (its `[plugins.config.<name>]` key).
    pub name: String,
    /// What it provides.
    pub kind: PluginKind,
    /// The plugin API version the library was built against.
    pub api_version: String,
    /// The instance, or why the plugin refused to start (its configuration, usually).
    pub instance: Result<PluginInstance, PluginConfigError>,
    /// Things worth logging that did not refuse it (e.g. built by another rustc).
    pub warnings: Vec<AbiWarning>,
}

impl fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("instance", &self.instance)
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// A file (or one plugin of it) that was not loaded, and why.
#[derive(Debug)]
pub struct RefusedPlugin {
    /// The library file (or the directory, when it could not be read).
    pub path: PathBuf,
    /// Why.
    pub reason: RefusalReason,
}

impl fmt::Display for RefusedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused plugin {}: {}", self.path.display(), self.reason)
    }
}

/// Why a plugin file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The plugin directory exists but could not be listed.
    #[error("cannot read the plugin directory: {0}")]
    ReadDir(std::io::Error),
    /// The dynamic loader refused the file (not a shared library, wrong architecture, missing
    /// dependencies, ...).
    #[error("cannot load the library: {0}")]
    Open(libloading::Error),
    /// The library does not export the declaration symbol.
    #[error("not a Portcullis plugin (no {DECLARATION_SYMBOL} symbol)")]
    NotAPlugin,
    /// The declaration failed validation.
    #[error(transparent)]
    Abi(#[from] AbiError),
    /// A WASM component was refused (not a component, not a Portcullis plugin, a wrong
    /// signature, a trap while starting).
    #[error(transparent)]
    Wasm(#[from] portcullis_plugin_wasm::WasmError),
    /// Another file already provides a plugin with this name (names are configuration tables,
    /// so they are unique across kinds).
    #[error("a plugin named {name:?} ({kind}) is already loaded from {}", first.display())]
    DuplicatePlugin {
        /// The kind.
        kind: PluginKind,
        /// The plugin name.
        name: String,
        /// The file that provided it first.
        first: PathBuf,
    },
}

/// Loads every shared library (`*.so`, `*.dylib` on macOS) in `dir` and creates each plugin it
/// exports with its configuration (`tables`) and host services (`context`). A missing directory
/// gives an empty report. A node loads the directory's WASM components too
/// (`crate::wasm_plugins::load_plugin_dir`).
pub fn load_plugin_dir(
    dir: &Path,
    tables: &PluginTables,
    context: &HostContext,
) -> PluginLoadReport {
    let mut report = PluginLoadReport::default();
    let files = match library_files(dir) {
        Ok(files) => files,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return report,
        Err(error) => {
            report.refused.push(RefusedPlugin {
                path: dir.to_owned(),
                reason: RefusalReason::ReadDir(error),
            });
            return report;
        }
    };
    for path in files {
        if let Err(reason) = load_library(&path, &path, tables, context, &mut report) {
            let refused = RefusedPlugin { path, reason };
            tracing::warn!("{refused}");
            report.refused.push(refused);
        }
    }
    report
}

/// Loads each library of `files` from its `opened` path, reporting it under its `shown` path (a
/// reload opens a private copy of a file of the plugin directory, see `reload::plugins`), with
/// the same checks as [`load_plugin_dir`]; names are checked for duplicates among `files` only.
pub fn load_library_files(
    files: &[(PathBuf, PathBuf)],
    tables: &PluginTables,
    context: &HostContext,
) -> PluginLoadReport {
    let mut report = PluginLoadReport::default();
    for (shown, opened) in files {
        if let Err(reason) = load_library(shown, opened, tables, context, &mut report) {
            let refused = RefusedPlugin {
                path: shown.clone(),
                reason,
            };
            tracing::warn!("{refused}");
            report.refused.push(refused);
        }
    }
    report
}

/// The shared libraries in `dir`, sorted so that load order (and duplicate resolution) does not
/// depend on the file system.
pub(crate) fn library_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_library = path
            .extension()
            .is_some_and(|ext| ext == std::env::consts::DLL_EXTENSION);
        if is_library && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn load_library(
    path: &Path,
    opened: &Path,
    tables: &PluginTables,
    context: &HostContext,
    report: &mut PluginLoadReport,
) -> Result<(), RefusalReason> {
    let library = open_forever(opened)?;
    // SAFETY: the declaration is a data symbol, so its "value" as libloading sees it is its
    // address; we read it as a pointer and dereference nothing here.
    let symbol = unsafe { library.get::<*const PluginDeclaration>(DECLARATION_SYMBOL.as_bytes()) };
    let declaration = match symbol {
        Ok(symbol) => *symbol,
        Err(_) => return Err(RefusalReason::NotAPlugin),
    };
    // SAFETY: the symbol is in a library that is never unloaded (`open_forever`). A library that
    // exports this name is trusted to export a real declaration: `validate_declaration` reads
    // only the 16-byte prefix until magic, ABI version and size match ours.
    let validated = unsafe { validate_declaration(declaration) }?;
    for warning in validated.warnings() {
        tracing::warn!(path = %path.display(), "native plugin: {warning}");
    }
    for export in validated.exports() {
        let (kind, name) = (export.kind(), export.name());
        // Names are unique across kinds too: a name is a configuration table.
        if let Some(first) = report.loaded.iter().find(|p| p.name == name) {
            let refused = RefusedPlugin {
                path: path.to_owned(),
                reason: RefusalReason::DuplicatePlugin {
                    kind,
                    name: name.to_owned(),
                    first: first.path.clone(),
                },
            };
            tracing::warn!("{refused}");
            report.refused.push(refused);
            continue;
        }
        let text = tables.text(name);
        let services = export_services(context.services_for(name));
        let instance = export.create(text, services).map_err(|error| match error {
            CreateError::Refused(refused) => tables.locate(name, &refused),
            other => PluginConfigError::other(name, other.to_string()),
        });
        match &instance {
            Ok(_) => tracing::info!(
                path = %path.display(),
                plugin = %name,
                kind = %kind,
                "loaded native plugin"
            ),
            Err(error) => {
                tracing::warn!(path = %path.display(), "native plugin refused to start: {error}")
            }
        }
        report.loaded.push(LoadedPlugin {
            path: path.to_owned(),
            name: name.to_owned(),
            kind,
            api_version: validated.api_version().to_owned(),
            instance,
            warnings: validated.warnings().to_vec(),
        });
    }
    Ok(())
}

/// Opens a library and leaks the handle, so it is never unloaded: `dlclose` is unsound in general
/// (function pointers and instances handed out keep pointing into the library, thread-local
/// destructors may still be registered, musl ignores it anyway). This applies to refused files
/// too — their initialisers have already run.
fn open_forever(path: &Path) -> Result<&'static libloading::Library, RefusalReason> {
    // SAFETY: opening runs the library's initialisers; native plugins are trusted code by
    // definition (docs/plugins.md). Never unloading makes any later use of its symbols sound.
    let library = unsafe { open(path) }.map_err(RefusalReason::Open)?;
    Ok(Box::leak(Box::new(library)))
}

/// `dlopen` with `RTLD_NOW`, so that a library with unresolved symbols is refused here rather
/// than crashing the host on first use, and `RTLD_LOCAL`, so that plugins' symbols stay apart.
///
/// # Safety
///
/// Runs the library's initialisers.
#[cfg(unix)]
unsafe fn open(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: forwarded to the caller.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Into::into)
}

/// # Safety
///
/// Runs the library's initialisers.
#[cfg(not(unix))]
unsafe fn open(path: &Path) -> Result<libloading::Library, libloading::Error> {
    // SAFETY: forwarded to the caller.
    unsafe { libloading::Library::new(path) }
}
