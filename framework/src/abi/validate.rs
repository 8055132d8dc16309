//! The host side's first step: checking a declaration read from a loaded library before anything
//! in it is called. The order is fixed — magic, ABI version, declaration size, plugin API version,
//! then each export's kind, name and function table — because each check is what makes reading
//! the next field meaningful.

use std::ptr::addr_of;

use super::error::{AbiError, AbiWarning};
use super::tables::KindTable;
use super::{
    PluginDeclaration, PluginExport, PluginKind, ABI_VERSION, DECLARATION_SIZE, FLAG_PANIC_UNWIND,
    PLUGIN_MAGIC, RUSTC_VERSION,
};

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
