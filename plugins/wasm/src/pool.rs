//! Initialised instances of one component, reused across calls, and the per-call sandbox: a
//! fresh fuel budget, the memory cap, and what a failed call does (counted, logged, instance
//! discarded — a trapped instance may not be entered again, and its memory is suspect).
//!
//! Pooling, not an instance per call: creating an instance also runs the component's `init`
//! (which parses its configuration) before the call itself; `max_idle_instances = 0` gives that
//! form, and `benches/forms.rs` measures both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use portcullis_plugin_api::Host;
use portcullis_plugin_api::Level as HostLevel;
use wasmtime::{ResourceLimiter, Store};

use crate::bindings::host::{self as wit_host, Level};
use crate::bindings::types;
use crate::error::{FailureKind, WasmError};
use crate::limits::WasmLimits;
use crate::request::RequestFacts;

/// The longest log message a component may write; the rest is cut (a component must not be able
/// to flood the gateway's log with one call).
const MAX_LOG_MESSAGE: usize = 4096;

/// Fuel for creating and initialising an instance, as a multiple of the per-call budget: `init`
/// parses a configuration, more work than a call.
const INIT_FUEL_FACTOR: u64 = 10;

/// What a store holds: the memory cap, the plugin's host services (for `log`) and, for an
/// authorizer during a call, the request it decides.
pub(crate) struct State {
    limiter: Limiter,
    host: Host,
    pub(crate) request: RequestFacts,
}

/// Caps linear memory and tables; remembers a refusal so the failure is reported as `memory`
/// rather than as the trap the component turns it into.
struct Limiter {
    max_memory_bytes: usize,
    memory_refused: bool,
}

/// Table elements per instance: a Rust component has a few hundred.
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.max_memory_bytes;
        if !allowed {
            self.memory_refused = true;
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

impl State {
    /// The plugin's host services (the clock the `clocks` grant reads).
    pub(crate) fn host(&self) -> &Host {
        &self.host
    }
}

impl types::Host for State {}

impl wit_host::Host for State {
    fn log(&mut self, level: Level, mut message: String) {
        if message.len() > MAX_LOG_MESSAGE {
            let mut end = MAX_LOG_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let level = match level {
            Level::Error => HostLevel::Error,
            Level::Warn => HostLevel::Warn,
            Level::Info => HostLevel::Info,
            Level::Debug => HostLevel::Debug,
            Level::Trace => HostLevel::Trace,
        };
        self.host.log(level, format_args!("{message}"));
    }
}

/// Calls that failed closed, by cause.
#[derive(Debug, Default)]
pub struct WasmStats {
    traps: AtomicU64,
    timeouts: AtomicU64,
    memory: AtomicU64,
    bad_answers: AtomicU64,
}

impl WasmStats {
    /// How many calls failed with `kind`.
    pub fn failures(&self, kind: FailureKind) -> u64 {
        self.counter(kind).load(Ordering::Relaxed)
    }

    fn counter(&self, kind: FailureKind) -> &AtomicU64 {
        match kind {
            FailureKind::Trap => &self.traps,
            FailureKind::Timeout => &self.timeouts,
            FailureKind::Memory => &self.memory,
            FailureKind::BadAnswer => &self.bad_answers,
        }
    }
}

/// Everything a pool needs besides the component.
pub(crate) struct Setup {
    pub(crate) name: Arc<str>,
    pub(crate) config: String,
    pub(crate) limits: WasmLimits,
    pub(crate) host: Host,
    pub(crate) stats: Arc<WasmStats>,
}

/// A world's pre-instantiated component: makes an instance and initialises it.
pub(crate) trait Instantiate: Send + Sync + 'static {
    /// The world's typed exports.
    type Bindings: Send + 'static;
    /// The plugin kind of the world.
    const KIND: crate::WasmKind;
    /// Instantiates the component in `store`.
    fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Self::Bindings>;
    /// Calls the component's `init` with the configuration text.
    fn init(
        bindings: &Self::Bindings,
        store: &mut Store<State>,
        config: &str,
    ) -> wasmtime::Result<Result<(), String>>;
}

/// Declares `$pre`, a world's pre-instantiated component (`$typed_pre`, from `bindgen!`) as an
/// [`Instantiate`] of plugin kind `$kind`: instances are `$bindings`, and `init` is the `init` of
/// the exported interface `$interface` (the accessor `bindgen!` names after it).
macro_rules! world_pre {
    ($pre:ident, $world:expr, $typed_pre:ident, $bindings:ty, $kind:expr, $interface:ident) => {
        pub(crate) struct $pre(pub(crate) $typed_pre<$crate::pool::State>);

        impl $pre {
            /// Type-checks every import and export of `component` against the world once, here,
            /// and creates the pool of its instances (the first one initialised with the
            /// plugin's table).
            pub(crate) fn pool(
                runtime: &$crate::engine::WasmRuntime,
                path: &std::path::Path,
                component: &wasmtime::component::Component,
                setup: $crate::pool::Setup,
            ) -> Result<$crate::pool::Pool<Self>, $crate::error::WasmError> {
                let pre = runtime.prepare(
                    path,
                    component,
                    $world,
                    &setup.limits.grant,
                    $typed_pre::new,
                )?;
                $crate::pool::Pool::new(Self(pre), runtime.engine().clone(), setup)
            }
        }

        impl $crate::pool::Instantiate for $pre {
            const KIND: $crate::WasmKind = $kind;
            type Bindings = $bindings;

            fn instantiate(
                &self,
                store: &mut wasmtime::Store<$crate::pool::State>,
            ) -> wasmtime::Result<$bindings> {
                self.0.instantiate(store)
            }

            fn init(
                bindings: &$bindings,
                store: &mut wasmtime::Store<$crate::pool::State>,
                config: &str,
            ) -> wasmtime::Result<Result<(), String>> {
                bindings.$interface().call_init(store, config)
            }
        }
    };
}
pub(crate) use world_pre;

/// One initialised instance.
pub(crate) struct Slot<B> {
    pub(crate) store: Store<State>,
    pub(crate) bindings: B,
}

/// A call that failed closed (already counted and logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failed(pub(crate) FailureKind);

/// The instances of one component.
pub(crate) struct Pool<P: Instantiate> {
    pre: P,
    engine: wasmtime::Engine,
    setup: Setup,
    idle: Mutex<Vec<Slot<P::Bindings>>>,
}

impl<P: Instantiate> Pool<P> {
    /// A pool with one instance created and initialised now, so that a component that refuses
    /// its configuration or traps in `init` is refused at start-up.
    pub(crate) fn new(pre: P, engine: wasmtime::Engine, setup: Setup) -> Result<Self, WasmError> {
        let pool = Self {
            pre,
            engine,
            setup,
            idle: Mutex::new(Vec::new()),
        };
        let slot = pool.create().map_err(|error| match error {
            CreateError::Refused(message) => WasmError::Refused {
                plugin: pool.setup.name.to_string(),
                kind: P::KIND,
                message,
            },
            CreateError::Failed(kind, message) => WasmError::Start {
                plugin: pool.setup.name.to_string(),
                kind,
                message,
            },
        })?;
        pool.give_back(slot);
        Ok(pool)
    }

    /// The plugin's name.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.setup.name
    }

    fn create(&self) -> Result<Slot<P::Bindings>, CreateError> {
        let state = State {
            limiter: Limiter {
                max_memory_bytes: self.setup.limits.max_memory_bytes,
                memory_refused: false,
            },
            host: self.setup.host.clone(),
            request: RequestFacts::default(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        let fuel = self
            .setup
            .limits
            .fuel_per_call
            .saturating_mul(INIT_FUEL_FACTOR);
        let failed = |store: &Store<State>, e: wasmtime::Error| {
            CreateError::Failed(classify(store, &e), one_line(&e))
        };
        store.set_fuel(fuel).map_err(|e| failed(&store, e))?;
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| failed(&store, e))?;
        match P::init(&bindings, &mut store, &self.setup.config) {
            Ok(Ok(())) => Ok(Slot { store, bindings }),
            Ok(Err(message)) => Err(CreateError::Refused(message)),
            Err(e) => Err(failed(&store, e)),
        }
    }

    /// An idle instance, or a new one.
    pub(crate) fn take(&self) -> Result<Slot<P::Bindings>, Failed> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(slot) => Ok(slot),
            None => self.create().map_err(|error| {
                let (kind, message) = match error {
                    // `init` accepted the same text at start-up; refusing it now is a bug of
                    // the component, failed closed like any other.
                    CreateError::Refused(message) => (FailureKind::BadAnswer, message),
                    CreateError::Failed(kind, message) => (kind, message),
                };
                self.report(kind, "creating an instance", &message)
            }),
        }
    }

    /// Returns a healthy instance for reuse (or drops it when enough are idle).
    pub(crate) fn give_back(&self, slot: Slot<P::Bindings>) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.setup.limits.max_idle_instances {
            idle.push(slot);
        }
    }

    /// Prepares `slot` for one call: a fresh fuel budget.
    pub(crate) fn arm(&self, slot: &mut Slot<P::Bindings>) -> Result<(), Failed> {
        slot.store.data_mut().limiter.memory_refused = false;
        slot.store
            .set_fuel(self.setup.limits.fuel_per_call)
            .map_err(|e| self.report(FailureKind::Trap, "setting fuel", &one_line(&e)))
    }

    /// Runs `call` on an armed instance; a failure is counted, logged and the instance dropped.
    pub(crate) fn call<R>(
        &self,
        what: &str,
        call: impl FnOnce(&P::Bindings, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, Failed> {
        let mut slot = self.take()?;
        self.arm(&mut slot)?;
        match call(&slot.bindings, &mut slot.store) {
            Ok(value) => {
                self.give_back(slot);
                Ok(value)
            }
            Err(error) => Err(self.failed(&slot.store, what, &error)),
        }
    }

    /// Counts and logs a failed call on `store` (whose instance the caller then drops).
    pub(crate) fn failed(
        &self,
        store: &Store<State>,
        what: &str,
        error: &wasmtime::Error,
    ) -> Failed {
        self.report(classify(store, error), what, &one_line(error))
    }

    /// Counts and logs a failure. The message is wasmtime's (a trap code, a backtrace of
    /// function names), never the call's arguments.
    pub(crate) fn report(&self, kind: FailureKind, what: &str, message: &str) -> Failed {
        self.setup
            .stats
            .counter(kind)
            .fetch_add(1, Ordering::Relaxed);
        self.setup.host.counter(&format!("wasm.failed.{kind}"), 1);
        tracing::warn!(
            plugin = %self.setup.name,
            failure = %kind,
            "wasm plugin failed closed while {what}: {message}"
        );
        Failed(kind)
    }
}

/// The trap (`wasm trap: …`) or the root cause, on one line: wasmtime's full message carries a
/// multi-line backtrace, which would split a log record.
fn one_line(error: &wasmtime::Error) -> String {
    let text = match error.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    text.replace(['\n', '\r'], " ")
}

enum CreateError {
    Refused(String),
    Failed(FailureKind, String),
}

/// What made a call fail: the memory cap (the component turns a refused growth into a trap of
/// its own), the fuel, or any other trap.
fn classify(store: &Store<State>, error: &wasmtime::Error) -> FailureKind {
    if store.data().limiter.memory_refused {
        return FailureKind::Memory;
    }
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel | wasmtime::Trap::Interrupt) => FailureKind::Timeout,
        _ => FailureKind::Trap,
    }
}
