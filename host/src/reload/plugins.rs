//! The plugin directory at a reload: libraries added since the last applied configuration, and
//! libraries whose content changed, are loaded (their plugins created with the reloaded
//! `[plugins.config.*]` tables); a library that is refused, or a plugin of it that refuses to
//! start (an error or a panic in its init), refuses the whole reload.
//!
//! A library whose content did not change is loaded again too when a plugin it provides of a kind
//! a reload renews (SASL mechanisms; the authorizer and principal builder on a node outside a
//! cluster) has a changed `[plugins.config.NAME]` table, so that new logins get an instance
//! created with the new table (the library is opened where it was opened before: the loader hands back the
//! library it has, and only a new instance is created; any other plugin of it is created as well
//! and left unused).
//!
//! Each new or changed library is first copied to a private file named by its content hash under the data
//! directory, and the copy is opened. Two reasons: the dynamic loader hands back the library it
//! already has for a path (or an inode) it has seen, so a changed file opened in place would give
//! the old code again; and a file of the plugin directory overwritten in place later would change
//! the pages of a library in use. Libraries are never unloaded (`plugin_loader::open_forever`):
//! the old content of a changed file stays mapped for the connections still using its plugins,
//! and new connections get the new one.
//!
//! WASM components (`*.wasm`) follow the same rules — new, changed, or providing a renewable
//! plugin whose table changed: loaded — without the private copy: a component's bytes are read
//! once and compiled, so the file can change under it; the old component's instances live on in
//! the connections that hold them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use portcullis::PluginKind;
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::plugin_config::PluginTables;
use crate::plugin_loader::{library_files, load_library_files, PluginLoadReport};
use crate::services::HostContext;
use crate::wasm_plugins::{component_files, load_component_files};

/// The directory under `node.data_dir` holding the private copies.
const COPIES: &str = "plugins-loaded";

/// Why the plugin directory refuses a reload.
#[derive(Debug, thiserror::Error)]
pub enum PluginRefusal {
    /// The plugin directory could not be read.
    #[error("plugins.dir {}: {source}", dir.display())]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A new or changed library could not be copied aside.
    #[error("plugin {}: cannot copy it to {}: {source}", file.display(), copy.display())]
    Copy {
        /// The library.
        file: PathBuf,
        /// Where it was to go.
        copy: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A new or changed library was refused, or one of its plugins refused to start.
    #[error("plugin {}: {reason}", file.display())]
    Refused {
        /// The library.
        file: PathBuf,
        /// The loader's or the plugin's reason.
        reason: String,
    },
    /// A new library provides a plugin name another library of the directory provides.
    #[error("plugin {}: a plugin named {name:?} is already provided by {}", file.display(), other.display())]
    Duplicate {
        /// The new library.
        file: PathBuf,
        /// The plugin name.
        name: String,
        /// The library that provides it already.
        other: PathBuf,
    },
}

/// The libraries of the plugin directory as last applied, and the plugins reloads loaded.
#[derive(Debug, Default)]
pub struct PluginFiles {
    /// Each library's and component's path and content hash.
    known: BTreeMap<PathBuf, [u8; 32]>,
    /// Plugins loaded by reloads (the newest content of each library), under the original path.
    loaded: PluginLoadReport,
}

/// The outcome of looking at the directory, applied with [`PluginFiles::commit`].
#[derive(Debug, Default)]
pub struct Scan {
    known: BTreeMap<PathBuf, [u8; 32]>,
    /// The plugins of the new and changed libraries.
    pub report: PluginLoadReport,
    /// The new and changed libraries, for the reload's report.
    pub files: Vec<PathBuf>,
}

impl Scan {
    /// The names of the plugins this scan loaded.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.report.loaded.iter().map(|p| p.name.as_str())
    }
}

impl PluginFiles {
    /// The libraries and components in `config`'s plugin directory now (as the node loaded them
    /// at start).
    pub fn at_start(config: &Config) -> Self {
        let dir = config.plugins.dir.as_deref();
        let libraries = dir.and_then(|dir| library_files(dir).ok());
        let components = dir.and_then(|dir| component_files(dir).ok());
        let known = libraries
            .unwrap_or_default()
            .into_iter()
            .chain(components.unwrap_or_default())
            .filter_map(|path| hash(&path).map(|h| (path, h)))
            .collect();
        Self {
            known,
            loaded: PluginLoadReport::default(),
        }
    }

    /// A scan that loads nothing and changes nothing when committed.
    pub fn unchanged(&self) -> Scan {
        Scan {
            known: self.known.clone(),
            ..Scan::default()
        }
    }

    /// The plugins reloads loaded, newest content of each library.
    pub fn reloaded(&self) -> &PluginLoadReport {
        &self.loaded
    }

    /// Loads the libraries of `config`'s plugin directory that are new or changed since the
    /// last commit, and those providing a plugin of a kind in `renewable` named in `retabled`
    /// (its table changed). `started` holds the plugins the node loaded at start (for duplicate
    /// names).
    ///
    /// # Errors
    /// [`PluginRefusal`]: the directory cannot be read, a library cannot be copied, is refused,
    /// provides a plugin that refuses to start, or a name another library provides.
    pub fn scan(
        &self,
        config: &Config,
        tables: &PluginTables,
        context: &HostContext,
        started: &PluginLoadReport,
        retabled: &[String],
        renewable: &[PluginKind],
    ) -> Result<Scan, PluginRefusal> {
        let Some(dir) = config.plugins.dir.as_deref() else {
            return Ok(Scan::default());
        };
        let read_dir_failed = |source| PluginRefusal::ReadDir {
            dir: dir.to_owned(),
            source,
        };
        let paths = match library_files(dir) {
            Ok(paths) => paths,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(read_dir_failed(source)),
        };
        let mut scan = Scan::default();
        let mut to_load = Vec::new();
        for path in paths {
            // A file that vanished between the listing and here is simply not there.
            let Some(h) = hash(&path) else { continue };
            let opened = if self.known.get(&path) != Some(&h)
                || provides(&self.loaded, &path, retabled, renewable)
            {
                Some(private_copy(&path, &h, &config.node.data_dir)?)
            } else if provides(started, &path, retabled, renewable) {
                // Loaded at start from its own path, unchanged: opened there again.
                Some(path.clone())
            } else {
                None
            };
            if let Some(opened) = opened {
                to_load.push((path.clone(), opened));
                scan.files.push(path.clone());
            }
            scan.known.insert(path, h);
        }
        scan.report = load_library_files(&to_load, tables, context);
        let mut components = Vec::new();
        for path in component_files(dir).map_err(read_dir_failed)? {
            let Some(h) = hash(&path) else { continue };
            if self.known.get(&path) != Some(&h)
                || provides(&self.loaded, &path, retabled, renewable)
                || provides(started, &path, retabled, renewable)
            {
                components.push(path.clone());
                scan.files.push(path.clone());
            }
            scan.known.insert(path, h);
        }
        load_component_files(dir, &components, tables, context, &mut scan.report);
        if let Some(refused) = scan.report.refused.first() {
            return Err(PluginRefusal::Refused {
                file: refused.path.clone(),
                reason: refused.reason.to_string(),
            });
        }
        for plugin in &scan.report.loaded {
            if let Err(error) = &plugin.instance {
                return Err(PluginRefusal::Refused {
                    file: plugin.path.clone(),
                    reason: error.to_string(),
                });
            }
            // The same name from another library of the directory is ambiguous; from the same
            // library (a changed file) it is that library's new content.
            let elsewhere = started
                .loaded
                .iter()
                .chain(&self.loaded.loaded)
                .filter(|p| !scan.files.contains(&p.path))
                .find(|p| p.name == plugin.name && scan.known.contains_key(&p.path));
            if let Some(other) = elsewhere {
                return Err(PluginRefusal::Duplicate {
                    file: plugin.path.clone(),
                    name: plugin.name.clone(),
                    other: other.path.clone(),
                });
            }
        }
        Ok(scan)
    }

    /// Makes `scan` the applied state: its plugins replace those of the same libraries.
    pub fn commit(&mut self, scan: Scan) {
        self.loaded.loaded.retain(|p| !scan.files.contains(&p.path));
        self.loaded.loaded.extend(scan.report.loaded);
        self.known = scan.known;
    }
}

/// Whether `report` has a plugin of a kind in `kinds` from `path` named in `names`.
fn provides(
    report: &PluginLoadReport,
    path: &Path,
    names: &[String],
    kinds: &[PluginKind],
) -> bool {
    report
        .loaded
        .iter()
        .any(|p| p.path == path && kinds.contains(&p.kind) && names.contains(&p.name))
}

fn hash(path: &Path) -> Option<[u8; 32]> {
    std::fs::read(path)
        .ok()
        .map(|bytes| Sha256::digest(&bytes).into())
}

/// Copies `file` to `<data_dir>/plugins-loaded/<hash>-<name>` (once per content) and returns
/// the copy's path.
fn private_copy(file: &Path, h: &[u8; 32], data_dir: &Path) -> Result<PathBuf, PluginRefusal> {
    let dir = data_dir.join(COPIES);
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    let prefix: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
    let copy = dir.join(format!("{prefix}-{}", name.unwrap_or_default()));
    let failed = |source| PluginRefusal::Copy {
        file: file.to_owned(),
        copy: copy.clone(),
        source,
    };
    if !copy.exists() {
        std::fs::create_dir_all(&dir).map_err(failed)?;
        // Written under a temporary name and renamed: a copy that exists is complete.
        let tmp = copy.with_extension("partial");
        std::fs::copy(file, &tmp).map_err(failed)?;
        std::fs::rename(&tmp, &copy).map_err(failed)?;
    }
    Ok(copy)
}
