//! The wasmtime engine (one per gateway), compiling components, telling which kind a component
//! exports, and the linker that gives a component the host's `log` (and an authorizer its
//! `request`) and nothing else.

use std::path::Path;

use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine};

use crate::bindings;
use crate::error::WasmError;
use crate::grants;
use crate::limits::WasiGrant;
use crate::pool::State;
use crate::WasmKind;

/// The one WASI interface the sandbox answers: `wasi:random/insecure-seed`, which Rust's standard
/// library calls to seed every `HashMap` (so almost any Rust component, and its `toml` parser,
/// needs it before it runs a line of its own). It is answered with bits the component cannot use
/// to learn anything about the gateway (a fresh random per call, from std's own hasher keys).
const INSECURE_SEED: &str = "wasi:random/insecure-seed@";

/// The world of an authorizer component, the one that imports `request`.
pub(crate) const AUTHORIZER_WORLD: &str = "authorizer-plugin";

/// Each plugin kind's interface, as a component exports it.
const KIND_EXPORTS: [(&str, WasmKind); 4] = [
    (
        concat!("portcullis:plugin/authorizer@", wit_version!()),
        WasmKind::Authorizer,
    ),
    (
        concat!("portcullis:plugin/sasl-mechanism@", wit_version!()),
        WasmKind::SaslMechanism,
    ),
    (
        concat!("portcullis:plugin/principal-builder@", wit_version!()),
        WasmKind::PrincipalBuilder,
    ),
    (
        concat!("portcullis:plugin/event-subscriber@", wit_version!()),
        WasmKind::EventSubscriber,
    ),
];

/// Compiles and links components. Cheap to clone (the engine is shared).
#[derive(Clone)]
pub struct WasmRuntime {
    engine: Engine,
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WasmRuntime")
    }
}

impl WasmRuntime {
    /// An engine with fuel metering on (the per-call budget) and the component model.
    ///
    /// # Errors
    /// wasmtime refuses the configuration (not expected on a supported platform).
    pub fn new() -> Result<Self, WasmError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        // Fuel makes a runaway call stop deterministically, without a timer thread.
        config.consume_fuel(true);
        let engine = Engine::new(&config).map_err(|e| WasmError::Compile {
            path: "<engine>".into(),
            message: format!("{e:#}"),
        })?;
        Ok(Self { engine })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles the bytes of the component file `path`.
    pub(crate) fn compile(&self, path: &Path, bytes: &[u8]) -> Result<Component, WasmError> {
        Component::new(&self.engine, bytes).map_err(|e| WasmError::Compile {
            path: path.to_owned(),
            message: format!("{e:#}"),
        })
    }

    /// Which kind `component` exports.
    pub(crate) fn kind_of(
        &self,
        path: &Path,
        component: &Component,
    ) -> Result<WasmKind, WasmError> {
        let path = || path.to_owned();
        let exports: Vec<String> = component
            .component_type()
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let kinds: Vec<WasmKind> = KIND_EXPORTS
            .iter()
            .filter(|(export, _)| exports.iter().any(|e| e == export))
            .map(|(_, kind)| *kind)
            .collect();
        match kinds[..] {
            [kind] => Ok(kind),
            [_, _, ..] => Err(WasmError::TwoKinds { path: path() }),
            [] => Err(WasmError::NoPluginExport {
                path: path(),
                exports: if exports.is_empty() {
                    "none".to_owned()
                } else {
                    exports.join(", ")
                },
            }),
        }
    }

    /// `component` linked and type-checked once against `world` (`typed` is the world's
    /// `...Pre::new`), ready to instantiate for the pool. Any refusal names the file and world.
    pub(crate) fn prepare<T>(
        &self,
        path: &Path,
        component: &Component,
        world: &'static str,
        granted: &[WasiGrant],
        typed: impl FnOnce(InstancePre<State>) -> wasmtime::Result<T>,
    ) -> Result<T, WasmError> {
        let link_error = |e: wasmtime::Error| WasmError::Link {
            path: path.to_owned(),
            world,
            message: format!("{e:#}"),
        };
        let linker = self.linker(component, world, granted).map_err(link_error)?;
        let pre = linker.instantiate_pre(component).map_err(link_error)?;
        typed(pre).map_err(link_error)
    }

    /// A linker for `component` of `world`: the `host` interface, for an authorizer the `request`
    /// it is asked about, the WASI interfaces `granted`, and every
    /// other import (WASI, anything) defined as a function that traps — by default the sandbox
    /// grants no file, socket, clock or environment, and a component that reaches for one fails
    /// that call closed.
    fn linker(
        &self,
        component: &Component,
        world: &str,
        granted: &[WasiGrant],
    ) -> wasmtime::Result<Linker<State>> {
        let mut linker = Linker::new(&self.engine);
        bindings::host::add_to_linker::<State, HasSelf<State>>(&mut linker, |state| state)?;
        if world == AUTHORIZER_WORLD {
            bindings::request::add_to_linker::<State, HasSelf<State>>(&mut linker, |state| state)?;
        }
        self.grant_insecure_seed(component, &mut linker)?;
        let imports: Vec<String> = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        grants::link(&mut linker, &imports, granted)?;
        linker.define_unknown_imports_as_traps(component)?;
        Ok(linker)
    }

    /// Defines `insecure-seed` for every version of the interface `component` imports.
    fn grant_insecure_seed(
        &self,
        component: &Component,
        linker: &mut Linker<State>,
    ) -> wasmtime::Result<()> {
        let names: Vec<String> = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .filter(|name| name.starts_with(INSECURE_SEED))
            .collect();
        for name in names {
            linker
                .instance(&name)?
                .func_wrap("insecure-seed", |_store, (): ()| Ok((random_pair(),)))?;
        }
        Ok(())
    }
}

/// Two random words from std's per-process random hasher keys (each `RandomState` differs).
fn random_pair() -> (u64, u64) {
    use std::hash::{BuildHasher, Hasher};
    let word = || {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    (word(), word())
}
