//! Sandboxed plugins: WebAssembly components that implement a Portcullis plugin kind through the
//! WIT package `portcullis:plugin` (`wit/plugin.wit`), run by wasmtime.
//!
//! A native plugin (the C ABI) runs with all of the gateway's privileges; a component runs in its
//! own linear memory, sees only the values handed to it, gets no WASI beyond the clocks and random
//! numbers it is granted (`grants.rs`; every other WASI import traps), and every call runs under a
//! fuel budget and a memory cap (`[plugins.wasm.NAME]`, [`WasmLimits`]).
//! A call that traps, runs out of fuel or hits the cap fails closed — the authorizer denies, the
//! mechanism fails the authentication — is counted and logged, and its instance is discarded;
//! the gateway carries on.
//!
//! The adapters implement the framework traits ([`Authorizer`], [`SaslMechanism`]), so the rest
//! of the host sees an `Arc<dyn Authorizer>` like any other. Instances are pooled
//! (`pool.rs`): a call takes an initialised instance, and gives it back unless it failed.

/// The version of `wit/plugin.wit`'s package, written once: the constants below and the export
/// names the engine looks for are built from it (a test checks it against the file).
macro_rules! wit_version {
    () => {
        "0.2.0"
    };
}

mod authorizer;
mod bindings;
mod engine;
mod error;
mod events;
mod grants;
mod limits;
mod mechanism;
mod pool;
mod principal;
mod request;

use std::path::Path;
use std::sync::Arc;

use portcullis_plugin_api::authorizer::Authorizer;
use portcullis_plugin_api::events::EventSubscriber;
use portcullis_plugin_api::principal::PrincipalBuilder;
use portcullis_plugin_api::sasl::SaslMechanism;
use portcullis_plugin_api::Host;

pub use engine::WasmRuntime;
pub use error::{FailureKind, WasmError};
pub use limits::{WasiGrant, WasmLimits};
pub use pool::WasmStats;

/// The file extension of a component in the plugin directory.
pub const EXTENSION: &str = "wasm";

/// The WIT package version this host speaks (`portcullis:plugin@…`).
pub const WIT_VERSION: &str = wit_version!();

/// The WIT package this host speaks, `portcullis:plugin@<version>`.
pub const WIT_PACKAGE: &str = concat!("portcullis:plugin@", wit_version!());

/// The plugin kind a component implements, read from its exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WasmKind {
    /// `portcullis:plugin/authorizer`.
    Authorizer,
    /// `portcullis:plugin/sasl-mechanism`.
    SaslMechanism,
    /// `portcullis:plugin/principal-builder`.
    PrincipalBuilder,
    /// `portcullis:plugin/event-subscriber`.
    EventSubscriber,
}

/// A loaded component, as the plugin it implements.
#[derive(Clone)]
#[non_exhaustive]
pub enum WasmPlugin {
    /// It exports `portcullis:plugin/authorizer`.
    Authorizer(Arc<dyn Authorizer>),
    /// It exports `portcullis:plugin/sasl-mechanism`.
    SaslMechanism(Arc<dyn SaslMechanism>),
    /// It exports `portcullis:plugin/principal-builder`.
    PrincipalBuilder(Arc<dyn PrincipalBuilder>),
    /// It exports `portcullis:plugin/event-subscriber`.
    EventSubscriber(Arc<dyn EventSubscriber>),
}

impl std::fmt::Debug for WasmPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WasmPlugin::Authorizer(_) => f.write_str("WasmPlugin::Authorizer"),
            WasmPlugin::SaslMechanism(m) => write!(f, "WasmPlugin::SaslMechanism({})", m.name()),
            WasmPlugin::PrincipalBuilder(_) => f.write_str("WasmPlugin::PrincipalBuilder"),
            WasmPlugin::EventSubscriber(_) => f.write_str("WasmPlugin::EventSubscriber"),
        }
    }
}

/// A loaded component with its failure counters.
#[derive(Debug, Clone)]
pub struct LoadedComponent {
    /// The plugin.
    pub plugin: WasmPlugin,
    /// Calls that failed closed, by cause (also published as the plugin's metrics).
    pub stats: Arc<WasmStats>,
}

/// The plugin name of a component file: its name without `.wasm`.
pub fn plugin_name(path: &Path) -> Option<&str> {
    match path.extension() {
        Some(ext) if ext == EXTENSION => path.file_stem()?.to_str(),
        _ => None,
    }
}

/// Compiles the component `bytes` (read by the host from `path`, which names it in errors), checks
/// which kind it exports, creates one instance and initialises it with `config` (the text of
/// `[plugins.config.NAME]`), under `limits`. No file is read here: I/O belongs to the host.
///
/// # Errors
/// [`WasmError`] naming why: not a component, no known export, a wrong signature, an import the
/// sandbox does not offer, a refused configuration, or a trap while initialising.
pub fn load_component(
    runtime: &WasmRuntime,
    path: &Path,
    bytes: &[u8],
    name: &str,
    config: &str,
    limits: &WasmLimits,
    host: Host,
) -> Result<LoadedComponent, WasmError> {
    let component = runtime.compile(path, bytes)?;
    let stats = Arc::new(WasmStats::default());
    let setup = pool::Setup {
        name: name.into(),
        config: config.into(),
        limits: limits.clone(),
        host,
        stats: Arc::clone(&stats),
    };
    let plugin = match runtime.kind_of(path, &component)? {
        WasmKind::Authorizer => WasmPlugin::Authorizer(Arc::new(authorizer::WasmAuthorizer::new(
            runtime, path, &component, setup,
        )?)),
        WasmKind::SaslMechanism => WasmPlugin::SaslMechanism(Arc::new(
            mechanism::WasmMechanism::new(runtime, path, &component, setup)?,
        )),
        WasmKind::PrincipalBuilder => WasmPlugin::PrincipalBuilder(Arc::new(
            principal::WasmPrincipalBuilder::new(runtime, path, &component, setup)?,
        )),
        WasmKind::EventSubscriber => WasmPlugin::EventSubscriber(Arc::new(
            events::WasmEventSubscriber::new(runtime, path, &component, setup)?,
        )),
    };
    Ok(LoadedComponent { plugin, stats })
}

#[cfg(test)]
mod tests {
    /// The version written once in this crate is the one of the WIT file it binds.
    #[test]
    fn the_wit_files_package_is_the_version_this_host_speaks() {
        let wit = include_str!("../wit/plugin.wit");
        let package = format!("package {};", super::WIT_PACKAGE);
        assert!(
            wit.lines().any(|line| line == package),
            "wit/plugin.wit does not declare `{package}`"
        );
    }
}
