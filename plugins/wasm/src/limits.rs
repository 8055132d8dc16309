//! `[plugins.wasm.NAME]`: what one component may use per call.

use serde::Deserialize;

/// The limits of one component. Every call (and the `init` of a new instance) gets a fresh fuel
/// budget; memory is capped per instance.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WasmLimits {
    /// Fuel per call: roughly one unit per WebAssembly instruction. A call that runs out traps and
    /// fails closed. The default (10 million) is some milliseconds of work; the example
    /// authorizer needs a few thousand per call.
    pub fuel_per_call: u64,
    /// The most linear memory one instance may have, in bytes (default 16 MiB). Growing past it
    /// fails the call closed.
    pub max_memory_bytes: usize,
    /// How many idle, initialised instances are kept for reuse (default 16). Concurrent calls
    /// beyond that create instances that are dropped afterwards; 0 creates a fresh instance for
    /// every call and every SASL exchange (no state survives a call, at the cost of an
    /// instantiation and `init` each time).
    pub max_idle_instances: usize,
}

/// The largest `max_memory_bytes`: 4 GiB, wasm32's address space.
pub const MAX_MEMORY_BYTES: usize = 1 << 32;

impl Default for WasmLimits {
    fn default() -> Self {
        Self {
            fuel_per_call: 10_000_000,
            max_memory_bytes: 16 << 20,
            max_idle_instances: 16,
        }
    }
}

impl WasmLimits {
    /// Checks the values; the error names the key.
    ///
    /// # Errors
    /// `(key, message)` for a value out of range.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.fuel_per_call == 0 {
            return Err(("fuel_per_call", "must be at least 1".to_owned()));
        }
        // A Rust component needs its stack and data (about 1 MiB) before it runs a line.
        if !(1 << 20..=MAX_MEMORY_BYTES).contains(&self.max_memory_bytes) {
            return Err((
                "max_memory_bytes",
                format!("must be from 1 MiB (1048576) to 4 GiB ({MAX_MEMORY_BYTES})"),
            ));
        }
        if self.max_idle_instances > 4096 {
            return Err(("max_idle_instances", "must be at most 4096".to_owned()));
        }
        Ok(())
    }
}
