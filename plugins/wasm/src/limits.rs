//! `[plugins.wasm.NAME]`: what one component may use per call, and what of the system it is
//! granted.

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
    /// The WASI interfaces granted beyond the sandbox's nothing (default: none). Files, sockets,
    /// the environment and stdio are never granted (see [`WasiGrant`]).
    pub grant: Vec<WasiGrant>,
}

/// A WASI interface a component may be granted (`grant = ["clocks", "random"]`). Each grants
/// values only: reading a clock, drawing random bytes. What is deliberately not offered, and
/// refused as an unknown grant: the filesystem, sockets, the environment and stdio — a plugin's
/// data comes in its configuration table and its output goes through the host's `log`, so a
/// component inside the security gateway never opens a file or a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WasiGrant {
    /// `wasi:clocks/wall-clock` (`now`, `resolution`) and `wasi:clocks/monotonic-clock` (`now`,
    /// `resolution`; waiting on a clock is not offered).
    Clocks,
    /// `wasi:random/random` (`get-random-bytes`, at most 64 KiB a call; `get-random-u64`) from
    /// the operating system's secure source.
    Random,
}

/// The largest `max_memory_bytes`: 4 GiB, wasm32's address space.
pub const MAX_MEMORY_BYTES: usize = 1 << 32;

impl Default for WasmLimits {
    fn default() -> Self {
        Self {
            fuel_per_call: 10_000_000,
            max_memory_bytes: 16 << 20,
            max_idle_instances: 16,
            grant: Vec::new(),
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
