//! The host side's first step: checking a declaration read from a loaded library before anything
//! in it is called. The order is fixed — magic, ABI version, declaration size, kind, framework
//! version — because each check is what makes reading the next field meaningful.

use std::ffi::c_void;
use std::ptr::addr_of;

use super::host::{DynamicMechanism, SaslFunctions};
use super::layout::{
    AbiBuf, AbiBytes, PluginDeclaration, PluginKind, SaslMechanismTable, CREATE_ERROR, CREATE_OK,
    CREATE_PANICKED, DECLARATION_SIZE, FLAG_PANIC_UNWIND, SASL_TABLE_SIZE,
};
use super::{ABI_VERSION, PLUGIN_MAGIC, RUSTC_VERSION};

/// Why a plugin was refused. The messages are for operators and name what the host expected.
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
    /// The plugin kind is not one this host knows.
    #[error("unknown plugin kind {kind} (this host knows 1 = SASL mechanism)")]
    UnknownKind {
        /// The kind code.
        kind: u32,
    },
    /// A string field is not NUL-terminated UTF-8 (or the name is empty).
    #[error("the declaration's {field} is not a valid NUL-terminated UTF-8 string")]
    MalformedField {
        /// The field name.
        field: &'static str,
    },
    /// The framework version is not `major.minor.patch`.
    #[error("the plugin's framework version {found:?} is not a semantic version")]
    BadFrameworkVersion {
        /// The version text.
        found: String,
    },
    /// The framework versions are not semver-compatible.
    #[error("built against portcullis {plugin}, this host runs portcullis {host} (needs the same major version, and for 0.x the same minor)")]
    IncompatibleFramework {
        /// The plugin's framework version.
        plugin: String,
        /// [`crate::FRAMEWORK_VERSION`].
        host: String,
    },
    /// The declaration's table pointer is null.
    #[error("the declaration has no function table")]
    MissingTable,
    /// The function table is shorter than the one this host knows.
    #[error("function table size {plugin} bytes, this host needs at least {host}")]
    TableTooSmall {
        /// The plugin's `table_size`.
        plugin: u32,
        /// This host's table size.
        host: u32,
    },
    /// A function table entry is null.
    #[error("function table entry `{function}` is null")]
    MissingFunction {
        /// The entry's name.
        function: &'static str,
    },
    /// The plugin's `from_config` returned an error.
    #[error("the plugin rejected its configuration: {message}")]
    ConfigRejected {
        /// The plugin's message.
        message: String,
    },
    /// The plugin panicked while creating its instance.
    #[error("the plugin panicked while creating its instance: {message}")]
    CreatePanicked {
        /// The panic message.
        message: String,
    },
    /// `create` returned a status this host does not know, or no instance.
    #[error("the plugin's create function returned status {status} without an instance")]
    BadCreateStatus {
        /// The status code.
        status: u32,
    },
    /// The mechanism name is empty or not UTF-8.
    #[error("the plugin's mechanism name is empty or not UTF-8")]
    BadMechanismName,
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
}

/// A declaration that passed every check: its facts, and the function table to build with.
#[derive(Debug)]
pub struct ValidatedPlugin {
    name: String,
    kind: PluginKind,
    framework_version: String,
    rustc_version: String,
    warnings: Vec<AbiWarning>,
    functions: SaslFunctions,
}

/// Checks a plugin declaration: magic, ABI version, declaration size, kind, framework version,
/// then the function table.
///
/// # Safety
///
/// - `declaration` is null or points to at least 16 readable bytes (magic, version, size), and to
///   `decl_size` readable bytes if those carry [`PLUGIN_MAGIC`] and [`ABI_VERSION`];
/// - a declaration that passes those checks was produced by [`crate::export_sasl_mechanism!`] (or
///   is laid out exactly like one): its table pointer and function pointers are what they claim;
/// - the library it came from is never unloaded, since the returned value keeps its functions.
pub unsafe fn validate_declaration(
    declaration: *const PluginDeclaration,
) -> Result<ValidatedPlugin, AbiError> {
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
    let kind = PluginKind::from_code(declaration.kind).ok_or(AbiError::UnknownKind {
        kind: declaration.kind,
    })?;
    let framework_version = field(declaration.framework_version.to_str(), "framework version")?;
    check_framework_version(framework_version, crate::FRAMEWORK_VERSION)?;
    let name = field(
        declaration.name.to_str().filter(|name| !name.is_empty()),
        "name",
    )?;
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

    let functions = match kind {
        // SAFETY: the declaration passed the checks above, so (caller's guarantee) its table
        // pointer is what a SASL mechanism plugin exports.
        PluginKind::SaslMechanism => unsafe { sasl_functions(declaration.table) }?,
    };
    Ok(ValidatedPlugin {
        name: name.to_owned(),
        kind,
        framework_version: framework_version.to_owned(),
        rustc_version: rustc_version.to_owned(),
        warnings,
        functions,
    })
}

fn field<'a>(value: Option<&'a str>, name: &'static str) -> Result<&'a str, AbiError> {
    value.ok_or(AbiError::MalformedField { field: name })
}

/// Checks and copies out a SASL mechanism table.
///
/// # Safety
///
/// `table` is null or points to a [`SaslMechanismTable`] prefix of at least 4 bytes, and to
/// `table_size` bytes laid out as the export macro writes them.
unsafe fn sasl_functions(table: *const c_void) -> Result<SaslFunctions, AbiError> {
    let table = table.cast::<SaslMechanismTable>();
    if table.is_null() {
        return Err(AbiError::MissingTable);
    }
    // SAFETY: non-null, and the caller guarantees the size prefix is readable.
    let table_size = unsafe { addr_of!((*table).table_size).read_unaligned() };
    if table_size < SASL_TABLE_SIZE {
        return Err(AbiError::TableTooSmall {
            plugin: table_size,
            host: SASL_TABLE_SIZE,
        });
    }
    // SAFETY: the table is at least as long as ours (caller's guarantee for `table_size` bytes);
    // it holds an integer and `Option`s of function pointers, for which every bit pattern is
    // valid (null is `None`).
    let table = unsafe { table.read_unaligned() };
    let missing = |function| AbiError::MissingFunction { function };
    Ok(SaslFunctions {
        create: table.create.ok_or(missing("create"))?,
        mechanism_name: table.mechanism_name.ok_or(missing("mechanism_name"))?,
        start: table.start.ok_or(missing("start"))?,
        step: table.step.ok_or(missing("step"))?,
        free_exchange: table.free_exchange.ok_or(missing("free_exchange"))?,
    })
}

/// Whether a plugin built against framework `plugin` may be loaded by framework `host`: the same
/// major version, for 0.x also the same minor, and for 0.0.x the same patch (Cargo's rules).
/// Pre-release and build suffixes are ignored: only C data crosses, so only the ABI matters.
pub(crate) fn check_framework_version(plugin: &str, host: &str) -> Result<(), AbiError> {
    let bad = || AbiError::BadFrameworkVersion {
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
        Err(AbiError::IncompatibleFramework {
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

/// The size of the buffer `create` may write its error message into.
const CREATE_ERROR_CAPACITY: usize = 1024;

impl ValidatedPlugin {
    /// The plugin's name (the key of its configuration table).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// What the plugin provides.
    pub fn kind(&self) -> PluginKind {
        self.kind
    }
    /// The framework version the plugin was built against.
    pub fn framework_version(&self) -> &str {
        &self.framework_version
    }
    /// The compiler that built the plugin.
    pub fn rustc_version(&self) -> &str {
        &self.rustc_version
    }
    /// Facts worth logging that did not refuse the plugin.
    pub fn warnings(&self) -> &[AbiWarning] {
        &self.warnings
    }

    /// Creates the plugin's mechanism from its configuration text (TOML, possibly empty). This is
    /// the first call into plugin code.
    pub fn create_sasl_mechanism(&self, config: &str) -> Result<DynamicMechanism, AbiError> {
        let mut message = vec![0u8; CREATE_ERROR_CAPACITY];
        let mut error = AbiBuf {
            ptr: message.as_mut_ptr(),
            capacity: message.len(),
            len: 0,
        };
        let mut instance: *const c_void = std::ptr::null();
        // SAFETY: `create` came from a validated table (see `validate_declaration`); the config
        // bytes, the instance slot and the error buffer are ours and outlive the call, and the
        // buffer's capacity is its real length.
        let status = unsafe {
            (self.functions.create)(
                AbiBytes::from_slice(config.as_bytes()),
                &mut instance,
                &mut error,
            )
        };
        let error_text = || {
            let written = message.get(..error.len).unwrap_or_default();
            String::from_utf8_lossy(written).into_owned()
        };
        match status {
            CREATE_OK if !instance.is_null() => {
                // SAFETY: a validated table's instance, which the plugin never frees.
                unsafe { DynamicMechanism::new(self.name.clone(), self.functions, instance) }
            }
            CREATE_ERROR => Err(AbiError::ConfigRejected {
                message: error_text(),
            }),
            CREATE_PANICKED => Err(AbiError::CreatePanicked {
                message: error_text(),
            }),
            status => Err(AbiError::BadCreateStatus { status }),
        }
    }
}
