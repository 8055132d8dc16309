//! What goes wrong with a component: refusals at load time ([`WasmError`]) and failed calls
//! ([`FailureKind`]).

use std::fmt;
use std::path::PathBuf;

/// Why a component was not loaded. Messages never quote configuration values; they do not repeat
/// the file (the `path` fields hold it), as the host prefixes its refusals with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WasmError {
    /// The file could not be read (by the host, which reads the file).
    #[error("cannot read the file: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a valid WebAssembly component (a core module, garbage, an unsupported feature).
    #[error("not a valid WebAssembly component: {message}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason.
        message: String,
    },
    /// The component exports no interface of `portcullis:plugin` this host knows.
    #[error("not a Portcullis plugin: the component exports neither portcullis:plugin/authorizer@{v} nor portcullis:plugin/sasl-mechanism@{v} (it exports: {exports})", v = crate::WIT_VERSION)]
    NoPluginExport {
        /// The file.
        path: PathBuf,
        /// What it exports instead.
        exports: String,
    },
    /// The component exports more than one plugin kind; one component is one plugin.
    #[error("the component exports more than one plugin kind (of authorizer, sasl-mechanism, principal-builder, event-subscriber); one component is one plugin")]
    TwoKinds {
        /// The file.
        path: PathBuf,
    },
    /// The component's imports or exports do not match the world (a wrong signature, an
    /// unknown import that cannot be stubbed).
    #[error("the component does not fit the portcullis:plugin {world} world: {message}")]
    Link {
        /// The file.
        path: PathBuf,
        /// The world it was checked against.
        world: &'static str,
        /// wasmtime's reason.
        message: String,
    },
    /// `init` refused the configuration table.
    #[error("plugin {plugin} refused its configuration: {message}")]
    Refused {
        /// The plugin.
        plugin: String,
        /// The kind it exports.
        kind: crate::WasmKind,
        /// The component's own message.
        message: String,
    },
    /// Creating or initialising the first instance failed (a trap, the fuel, the memory cap).
    #[error("plugin {plugin} failed while starting: {kind}: {message}")]
    Start {
        /// The plugin.
        plugin: String,
        /// What failed.
        kind: FailureKind,
        /// wasmtime's reason.
        message: String,
    },
}

/// Why a call into a component failed; each fails the call closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The component trapped (a panic, `unreachable`, an out-of-bounds access, a stack overflow,
    /// a WASI call the sandbox does not grant).
    Trap,
    /// The call used up its fuel (`fuel_per_call`).
    Timeout,
    /// The component asked for more memory than `max_memory_bytes`.
    Memory,
    /// The component answered something the host cannot use (e.g. fewer decisions than actions).
    BadAnswer,
}

impl FailureKind {
    /// The metric name suffix and log word.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Trap => "trap",
            FailureKind::Timeout => "timeout",
            FailureKind::Memory => "memory",
            FailureKind::BadAnswer => "bad_answer",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
