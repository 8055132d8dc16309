//! Why a plugin library was refused ([`AbiError`]) and what about it is worth logging
//! ([`AbiWarning`]): the outcomes of checking a declaration and its function tables.

use portcullis_plugin_api::abi::PLUGIN_MAGIC;
#[cfg(doc)]
use portcullis_plugin_api::abi::{ABI_VERSION, RUSTC_VERSION};

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
