//! Loading native plugins: every shared library in the plugin directory is opened, its
//! declaration checked (`portcullis::abi::validate_declaration`), and its mechanism created with
//! its configuration. A library that fails any step is refused — reported with its path and the
//! reason — and the host keeps starting with the others.
//!
//! Native plugins are trusted code: opening a library runs its initialisers before any check,
//! and nothing sandboxes it afterwards. Libraries are never unloaded (see `open_forever` for why).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use portcullis::abi::{
    validate_declaration, AbiError, AbiWarning, PluginDeclaration, PluginKind, DECLARATION_SYMBOL,
};
use portcullis::sasl::SaslMechanism;

/// What loading a plugin directory produced.
#[derive(Debug, Default)]
pub struct PluginLoadReport {
    /// Plugins ready to use, in file name order.
    pub loaded: Vec<LoadedPlugin>,
    /// Files that were refused, in file name order.
    pub refused: Vec<RefusedPlugin>,
}

/// A plugin that loaded.
pub struct LoadedPlugin {
    /// The library file.
    pub path: PathBuf,
    /// The plugin's name (its `[plugins.config.<name>]` key).
    pub name: String,
    /// What it provides.
    pub kind: PluginKind,
    /// The mechanism, for the host's mechanism table.
    pub mechanism: Arc<dyn SaslMechanism>,
    /// Things worth logging that did not refuse it (e.g. built by another rustc).
    pub warnings: Vec<AbiWarning>,
}

impl fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("mechanism", &self.mechanism.name())
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// A file that was not loaded, and why.
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
    /// The declaration failed validation, or the plugin refused to create its instance.
    #[error("{0}")]
    Abi(#[from] AbiError),
    /// Another file already provides a plugin with this name.
    #[error("a plugin named {name:?} is already loaded from {}", first.display())]
    DuplicatePlugin {
        /// The plugin name.
        name: String,
        /// The file that provided it first.
        first: PathBuf,
    },
    /// Another plugin already provides this mechanism.
    #[error("mechanism {mechanism} is already provided by {}", first.display())]
    DuplicateMechanism {
        /// The mechanism name.
        mechanism: String,
        /// The file that provided it first.
        first: PathBuf,
    },
}

/// Loads every shared library (`*.so`, `*.dylib` on macOS) in `dir`. `configs` maps a plugin
/// name to the TOML text of its configuration table (see [`config_to_text`]); a plugin without
/// an entry gets empty text. A missing directory gives an empty report.
pub fn load_plugin_dir(dir: &Path, configs: &BTreeMap<String, String>) -> PluginLoadReport {
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
        match load_plugin(&path, configs, &report.loaded) {
            Ok(plugin) => {
                tracing::info!(
                    path = %plugin.path.display(),
                    plugin = %plugin.name,
                    mechanism = %plugin.mechanism.name(),
                    "loaded native plugin"
                );
                for warning in &plugin.warnings {
                    tracing::warn!(path = %plugin.path.display(), "native plugin: {warning}");
                }
                report.loaded.push(plugin);
            }
            Err(reason) => {
                let refused = RefusedPlugin { path, reason };
                tracing::warn!("{refused}");
                report.refused.push(refused);
            }
        }
    }
    report
}

/// The TOML text handed to a plugin for its `[plugins.config.<name>]` table.
pub fn config_to_text(table: &toml::Table) -> Result<String, toml::ser::Error> {
    toml::to_string(table)
}

/// The shared libraries in `dir`, sorted so that load order (and duplicate resolution) does not
/// depend on the file system.
fn library_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
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

fn load_plugin(
    path: &Path,
    configs: &BTreeMap<String, String>,
    loaded: &[LoadedPlugin],
) -> Result<LoadedPlugin, RefusalReason> {
    let library = open_forever(path)?;
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
    let plugin = unsafe { validate_declaration(declaration) }?;
    if let Some(first) = loaded.iter().find(|p| p.name == plugin.name()) {
        return Err(RefusalReason::DuplicatePlugin {
            name: plugin.name().to_owned(),
            first: first.path.clone(),
        });
    }
    let config = configs.get(plugin.name()).map_or("", String::as_str);
    let mechanism = match plugin.kind() {
        PluginKind::SaslMechanism => plugin.create_sasl_mechanism(config)?,
        // `PluginKind` is non-exhaustive; validation refuses kinds this framework does not know,
        // so this is only reached if the framework learns a kind before the host does.
        _ => {
            return Err(RefusalReason::Abi(AbiError::UnknownKind {
                kind: plugin.kind().code(),
            }))
        }
    };
    if let Some(first) = loaded
        .iter()
        .find(|p| p.mechanism.name() == mechanism.name())
    {
        return Err(RefusalReason::DuplicateMechanism {
            mechanism: mechanism.name().to_owned(),
            first: first.path.clone(),
        });
    }
    Ok(LoadedPlugin {
        path: path.to_owned(),
        name: plugin.name().to_owned(),
        kind: plugin.kind(),
        mechanism: Arc::new(mechanism),
        warnings: plugin.warnings().to_vec(),
    })
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
