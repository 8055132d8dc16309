//! The WASI interfaces a component can be granted (`[plugins.wasm.NAME] grant`): clocks and
//! secure random numbers, values only. Each is defined for every version of its interface the
//! component imports; what a granted interface has beyond that (waiting on a clock: pollables)
//! stays a trap, like everything not granted.

use std::sync::OnceLock;
use std::time::Instant;

use wasmtime::component::{ComponentType, Lift, Linker, Lower};
use wasmtime::StoreContextMut;

use crate::limits::WasiGrant;
use crate::pool::State;

const WALL_CLOCK: &str = "wasi:clocks/wall-clock@";
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@";
const RANDOM: &str = "wasi:random/random@";

/// The most bytes one `get-random-bytes` call returns: the length comes from the component, and
/// the host allocates it.
pub(crate) const MAX_RANDOM_BYTES: u64 = 64 * 1024;

/// `wasi:clocks/wall-clock.datetime`.
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug)]
#[component(record)]
struct Datetime {
    seconds: u64,
    nanoseconds: u32,
}

/// Defines the functions of the granted interfaces among `imports` in `linker`.
pub(crate) fn link(
    linker: &mut Linker<State>,
    imports: &[String],
    granted: &[WasiGrant],
) -> wasmtime::Result<()> {
    for name in imports {
        if granted.contains(&WasiGrant::Clocks) && name.starts_with(WALL_CLOCK) {
            let mut instance = linker.instance(name)?;
            instance.func_wrap("now", |store: StoreContextMut<'_, State>, (): ()| {
                Ok((wall_now(store.data().host().now_ms()),))
            })?;
            instance.func_wrap("resolution", |_store, (): ()| {
                Ok((Datetime {
                    seconds: 0,
                    nanoseconds: 1_000_000,
                },))
            })?;
        }
        if granted.contains(&WasiGrant::Clocks) && name.starts_with(MONOTONIC_CLOCK) {
            let mut instance = linker.instance(name)?;
            instance.func_wrap("now", |_store, (): ()| Ok((monotonic_now(),)))?;
            instance.func_wrap("resolution", |_store, (): ()| Ok((1u64,)))?;
        }
        if granted.contains(&WasiGrant::Random) && name.starts_with(RANDOM) {
            let mut instance = linker.instance(name)?;
            instance.func_wrap("get-random-bytes", |_store, (len,): (u64,)| {
                random_bytes(len).map(|bytes| (bytes,))
            })?;
            instance.func_wrap("get-random-u64", |_store, (): ()| {
                let bytes = random_bytes(8)?;
                let mut word = [0u8; 8];
                word.copy_from_slice(&bytes);
                Ok((u64::from_le_bytes(word),))
            })?;
        }
    }
    Ok(())
}

/// The host's wall clock (milliseconds since the epoch, as every plugin gets it) as a datetime.
fn wall_now(now_ms: i64) -> Datetime {
    let ms = u64::try_from(now_ms).unwrap_or(0);
    Datetime {
        seconds: ms / 1000,
        nanoseconds: u32::try_from(ms % 1000).unwrap_or(0) * 1_000_000,
    }
}

/// Nanoseconds since the first reading in this process (WASI's instants have an arbitrary
/// origin; a shared one keeps them ordered across instances).
#[allow(
    clippy::disallowed_methods,
    reason = "the host reads the monotonic clock on a granted component's behalf: that is the grant"
)]
fn monotonic_now() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn random_bytes(len: u64) -> wasmtime::Result<Vec<u8>> {
    if len > MAX_RANDOM_BYTES {
        return Err(wasmtime::Error::msg(format!(
            "get-random-bytes: {len} bytes asked, at most {MAX_RANDOM_BYTES} a call"
        )));
    }
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    getrandom::fill(&mut bytes)
        .map_err(|e| wasmtime::Error::msg(format!("the system's random source failed: {e}")))?;
    Ok(bytes)
}
