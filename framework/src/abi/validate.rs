//! The host side's first step: checking a declaration read from a loaded library before anything
//! in it is called. The order is fixed — magic, ABI version, declaration size, plugin API version,
//! then each export's kind, name and function table — because each check is what makes reading
//! the next field meaningful.

use std::ffi::c_void;
use std::ptr::addr_of;

use super::tables::KindTable;
use super::{
    PluginDeclaration, PluginExport, PluginKind, ABI_VERSION, DECLARATION_SIZE, FLAG_PANIC_UNWIND,
    PLUGIN_MAGIC, RUSTC_VERSION,
};

/// Why a plugin library was refused. The messages are for operators and name what the host
/// expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AbiError {
    /// The declaration symbol's address is null.
    #[error("the plugin declaration symbol is a null pointer")]
    NullDeclaration,
    /// The first eight bytes are not [`PLUGIN_MAGIC`].
    #[error("bad magic bytes {found:02x?} (expected {PLUGIN_MAGIC:02x?}): not a Portcullis plugin declaration")]
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
    },
    /// The plugin was built for another ABI version.
    #[error("ABI version {plugin}, this host speaks {host}")]
    AbiVersion {
        /// The plugin's version.
        plugin: u32,
        /// [`ABI_VERSION`].
        host: u32,
    },
    /// The declaration is shorter than the one this host knows.
    #[error("declaration size {plugin} bytes, this host needs at least {host}")]
    DeclarationTooSmall {
        /// The plugin's `decl_size`.
        plugin: u32,
        /// This host's declaration size.
        host: u32,
    },
    /// A string field is not NUL-terminated UTF-8 (or a name is empty).
    #[error("the declaration's {field} is not a valid NUL-terminated UTF-8 string")]
    MalformedField {
        /// The field name.
        field: &'static str,
    },
    /// The plugin API version is not `major.minor.patch`.
    #[error("the plugin's API version {found:?} is not a semantic version")]
    BadApiVersion {
        /// The version text.
        found: String,
    },
    /// The plugin API versions are not semver-compatible.
    #[error("built against portcullis-plugin-api {plugin}, this host runs portcullis-plugin-api {host} (needs the same major version, and for 0.x the same minor)")]
    IncompatibleApi {
        /// The plugin's API version.
        plugin: String,
        /// [`portcullis_plugin_api::API_VERSION`].
        host: String,
    },
    /// The declaration lists no exports, or its export array is null.
    #[error("the declaration exports no plugin")]
    NoExports,
    /// An export's kind is not one this host knows.
    #[error("export {index} ({name:?}): unknown plugin kind {kind} (this host knows 1 = SASL mechanism, 2 = authorizer, 3 = principal builder, 4 = login module, 5 = forwarding policy, 6 = event subscriber)")]
    UnknownKind {
        /// The export's position.
        index: usize,
        /// Its name, if readable.
        name: String,
        /// The kind code.
        kind: u32,
    },
    /// Two exports of one library have the same name.
    #[error("two exports are named {name:?}")]
    DuplicateExport {
        /// The name.
        name: String,
    },
    /// An export's table pointer is null.
    #[error("{plugin}: the export has no function table")]
    MissingTable {
        /// The plugin's name.
        plugin: String,
    },
    /// A function table is shorter than the one this host knows.
    #[error("{plugin}: function table size {found} bytes, this host needs at least {needed}")]
    TableTooSmall {
        /// The plugin's name.
        plugin: String,
        /// The plugin's `table_size`.
        found: u32,
        /// This host's table size.
        needed: u32,
    },
    /// A function table entry is null.
    #[error("{plugin}: function table entry `{function}` is null")]
    MissingFunction {
        /// The plugin's name.
        plugin: String,
        /// The entry's name.
        function: &'static str,
    },
}

/// Something about a plugin worth logging that does not refuse it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AbiWarning {
    /// Another compiler built the plugin. Harmless while only C data crosses the boundary.
    #[error("built by {plugin}, this host was built by {host}")]
    RustcMismatch {
        /// The plugin's compiler.
        plugin: String,
        /// [`RUSTC_VERSION`].
        host: String,
    },
    /// The plugin was built with `panic = "abort"`: a panic in it ends the whole process.
    #[error("built with panic = \"abort\": a panic in the plugin aborts the host")]
    PanicAbort,
    /// The plugin expects a newer services table than this host has: the services it does not
    /// find do nothing.
    #[error("built against host services version {plugin}, this host offers version {host}: the newer services are no-ops")]
    NewerServices {
        /// The plugin's services version.
        plugin: u32,
        /// This host's.
        host: u32,
    },
}

/// A declaration that passed every check: its facts, and the function table of each export.
#[derive(Debug)]
pub struct ValidatedLibrary {
    api_version: String,
    rustc_version: String,
    services_version: u32,
    warnings: Vec<AbiWarning>,
    exports: Vec<ValidatedExport>,
}

/// One validated export: a plugin's name, kind and checked functions.
#[derive(Debug, Clone)]
pub struct ValidatedExport {
    pub(crate) name: String,
    pub(crate) table: KindTable,
}

impl ValidatedExport {
    /// The plugin's name (its configuration key).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// What the plugin provides.
    pub fn kind(&self) -> PluginKind {
        self.table.kind()
    }
}

impl ValidatedLibrary {
    /// The plugin API version the library was built against.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }
    /// The compiler that built the library.
    pub fn rustc_version(&self) -> &str {
        &self.rustc_version
    }
    /// The services table version the library was built against.
    pub fn services_version(&self) -> u32 {
        self.services_version
    }
    /// Facts worth logging that did not refuse it.
    pub fn warnings(&self) -> &[AbiWarning] {
        &self.warnings
    }
    /// Its plugins, in declaration order.
    pub fn exports(&self) -> &[ValidatedExport] {
        &self.exports
    }
}

/// The most exports a library may declare (a sanity bound on a count read from the plugin).
const MAX_EXPORTS: u32 = 256;

/// Checks a plugin library's declaration: magic, ABI version, declaration size, API version, then
/// every export.
///
/// # Safety
///
/// - `declaration` is null or points to at least 16 readable bytes (magic, version, size), and to
///   `decl_size` readable bytes if those carry [`PLUGIN_MAGIC`] and [`ABI_VERSION`];
/// - a declaration that passes those checks was produced by the plugin API's export macro (or is
///   laid out exactly like one): its exports array, table pointers and function pointers are what
///   they claim;
/// - the library it came from is never unloaded, since the returned value keeps its functions.
pub unsafe fn validate_declaration(
    declaration: *const PluginDeclaration,
) -> Result<ValidatedLibrary, AbiError> {
    if declaration.is_null() {
        return Err(AbiError::NullDeclaration);
    }
    // SAFETY: non-null, and the caller guarantees the 16-byte prefix is readable. Unaligned reads
    // and no references, since nothing is known yet about what the symbol points to.
    let (magic, abi_version, decl_size) = unsafe {
        (
            addr_of!((*declaration).magic).read_unaligned(),
            addr_of!((*declaration).abi_version).read_unaligned(),
            addr_of!((*declaration).decl_size).read_unaligned(),
        )
    };
    if magic != PLUGIN_MAGIC {
        return Err(AbiError::BadMagic { found: magic });
    }
    if abi_version != ABI_VERSION {
        return Err(AbiError::AbiVersion {
            plugin: abi_version,
            host: ABI_VERSION,
        });
    }
    if decl_size < DECLARATION_SIZE {
        return Err(AbiError::DeclarationTooSmall {
            plugin: decl_size,
            host: DECLARATION_SIZE,
        });
    }
    // SAFETY: the magic, version and size say the plugin's declaration is at least as long as
    // ours, which the caller guarantees is readable. `PluginDeclaration` holds only integers,
    // byte arrays and a raw pointer, so any bit pattern is a valid value.
    let declaration = unsafe { declaration.read_unaligned() };
    let api_version = field(declaration.api_version.to_str(), "API version")?;
    check_api_version(api_version, portcullis_plugin_api::API_VERSION)?;
    let rustc_version = field(declaration.rustc_version.to_str(), "rustc version")?;

    let mut warnings = Vec::new();
    if rustc_version != RUSTC_VERSION {
        warnings.push(AbiWarning::RustcMismatch {
            plugin: rustc_version.to_owned(),
            host: RUSTC_VERSION.to_owned(),
        });
    }
    if declaration.flags & FLAG_PANIC_UNWIND == 0 {
        warnings.push(AbiWarning::PanicAbort);
    }
    if declaration.services_version > super::SERVICES_VERSION {
        warnings.push(AbiWarning::NewerServices {
            plugin: declaration.services_version,
            host: super::SERVICES_VERSION,
        });
    }

    if declaration.exports.is_null()
        || declaration.export_count == 0
        || declaration.export_count > MAX_EXPORTS
    {
        return Err(AbiError::NoExports);
    }
    let mut exports: Vec<ValidatedExport> = Vec::new();
    for index in 0..declaration.export_count as usize {
        // SAFETY: the declaration passed the checks above, so (caller's guarantee) `exports`
        // points to `export_count` entries laid out as `PluginExport`, which holds only integers,
        // a byte array and a raw pointer (any bit pattern is valid).
        let export: PluginExport = unsafe { declaration.exports.add(index).read_unaligned() };
        let name = field(
            export.name.to_str().filter(|n| !n.is_empty()),
            "plugin name",
        )?;
        let kind = PluginKind::from_code(export.kind).ok_or_else(|| AbiError::UnknownKind {
            index,
            name: name.to_owned(),
            kind: export.kind,
        })?;
        if exports.iter().any(|e| e.name == name) {
            return Err(AbiError::DuplicateExport {
                name: name.to_owned(),
            });
        }
        // SAFETY: as above, the export's table is what a plugin of `kind` exports.
        let table = unsafe { KindTable::read(kind, name, export.table) }?;
        exports.push(ValidatedExport {
            name: name.to_owned(),
            table,
        });
    }
    Ok(ValidatedLibrary {
        api_version: api_version.to_owned(),
        rustc_version: rustc_version.to_owned(),
        services_version: declaration.services_version,
        warnings,
        exports,
    })
}

fn field<'a>(value: Option<&'a str>, name: &'static str) -> Result<&'a str, AbiError> {
    value.ok_or(AbiError::MalformedField { field: name })
}

/// Reads a table's size prefix and the table itself, checking it is at least as long as `T`.
///
/// # Safety
///
/// `table` is null or points to a table prefix of at least 4 bytes, and to `table_size` bytes laid
/// out as a `T` (integers and `Option`s of function pointers: every bit pattern is valid).
pub(crate) unsafe fn read_table<T: Copy>(
    plugin: &str,
    table: *const c_void,
    needed: u32,
) -> Result<T, AbiError> {
    if table.is_null() {
        return Err(AbiError::MissingTable {
            plugin: plugin.to_owned(),
        });
    }
    // SAFETY: non-null, and the caller guarantees the size prefix is readable.
    let found = unsafe { table.cast::<u32>().read_unaligned() };
    if found < needed {
        return Err(AbiError::TableTooSmall {
            plugin: plugin.to_owned(),
            found,
            needed,
        });
    }
    // SAFETY: the table is at least as long as ours (caller's guarantee for `table_size` bytes),
    // and every bit pattern of `T` is valid (caller).
    Ok(unsafe { table.cast::<T>().read_unaligned() })
}

/// A required function, or [`AbiError::MissingFunction`].
pub(crate) fn required<F>(
    plugin: &str,
    function: Option<F>,
    name: &'static str,
) -> Result<F, AbiError> {
    function.ok_or_else(|| AbiError::MissingFunction {
        plugin: plugin.to_owned(),
        function: name,
    })
}

/// Whether a plugin built against plugin API `plugin` may be loaded by a host with `host`: the
/// same major version, for 0.x also the same minor, and for 0.0.x the same patch (Cargo's rules).
/// Pre-release and build suffixes are ignored: only C data crosses, so only the ABI matters.
pub(crate) fn check_api_version(plugin: &str, host: &str) -> Result<(), AbiError> {
    let bad = || AbiError::BadApiVersion {
        found: plugin.to_owned(),
    };
    let plugin_parts = parse_version(plugin).ok_or_else(bad)?;
    let host_parts = parse_version(host).ok_or_else(bad)?;
    let compatible = match (plugin_parts, host_parts) {
        ((0, 0, p1), (0, 0, p2)) => p1 == p2,
        ((0, m1, _), (0, m2, _)) => m1 == m2,
        ((x1, _, _), (x2, _, _)) => x1 == x2,
    };
    if compatible {
        Ok(())
    } else {
        Err(AbiError::IncompatibleApi {
            plugin: plugin.to_owned(),
            host: host.to_owned(),
        })
    }
}

fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|part| part.parse::<u64>().ok());
    let parsed = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(parsed)
}
