//! The table of services the host hands every plugin at `create` ([`AbiHostServices`]) and the
//! log-level and metric-kind codes its functions take.

use std::ffi::c_void;
use std::mem::size_of;

#[cfg(doc)]
use super::common::PART_VALUE;
use super::common::{AbiBytes, AbiSink};

/// The services the host hands a plugin at `create`, versioned: fields are only appended, `size`
/// and `version` say how many the host has, and a plugin built against a longer table uses only
/// what this one holds (a missing service is a no-op). Valid for the life of the process.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiHostServices {
    /// [`crate::abi::SERVICES_VERSION`] of the host that built the table.
    pub version: u32,
    /// `size_of::<AbiHostServices>()` in the host.
    pub size: u32,
    /// The host's state for this plugin (passed back to every function).
    pub context: *const c_void,
    /// Logs a UTF-8 message at a `LEVEL_*`, attributed to the plugin.
    pub log: Option<unsafe extern "C" fn(context: *const c_void, level: u32, message: AbiBytes)>,
    /// Whether a message at this `LEVEL_*` would be logged (1) or not (0).
    pub log_enabled: Option<unsafe extern "C" fn(context: *const c_void, level: u32) -> u32>,
    /// Milliseconds since the Unix epoch.
    pub now_ms: Option<unsafe extern "C" fn(context: *const c_void) -> i64>,
    /// Looks up a user's SCRAM credential (`mechanism`: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512); when
    /// found, writes it to the sink's [`PART_VALUE`] (see `codec::encode_scram_credential`) and
    /// returns 1, else 0.
    pub scram_credential: Option<
        unsafe extern "C" fn(
            context: *const c_void,
            user: AbiBytes,
            mechanism: u32,
            sink: *const AbiSink,
        ) -> u32,
    >,
    /// Looks up a delegation token with its SCRAM credential for `mechanism`; when found,
    /// writes it to [`PART_VALUE`] (`codec::encode_token_credential`) and returns 1, else 0.
    pub token: Option<
        unsafe extern "C" fn(
            context: *const c_void,
            token_id: AbiBytes,
            mechanism: u32,
            sink: *const AbiSink,
        ) -> u32,
    >,
    /// `TokenView::accepts_token_without_extension` (1 or 0).
    pub token_without_extension:
        Option<unsafe extern "C" fn(context: *const c_void, name: AbiBytes) -> u32>,
    /// Publishes a metric value (`kind`: a `METRIC_*` code).
    pub publish_metric:
        Option<unsafe extern "C" fn(context: *const c_void, kind: u32, name: AbiBytes, value: f64)>,
    /// (Services version 2.) Opens a span named by the UTF-8 `name` as a child of the host's
    /// current span and makes it current on the calling thread; returns its handle, or 0 when
    /// the host traces nothing (then `span_exit` need not be called). The plugin's log lines go
    /// to the innermost open span.
    pub span_enter: Option<unsafe extern "C" fn(context: *const c_void, name: AbiBytes) -> u64>,
    /// (Services version 2.) Closes the span `handle` from `span_enter`, on the thread that
    /// opened it, and any span the plugin opened inside it and left open.
    pub span_exit: Option<unsafe extern "C" fn(context: *const c_void, handle: u64)>,
}

// SAFETY: the table is immutable once built, and the host promises its functions may be called
// from any thread with its `context`.
unsafe impl Sync for AbiHostServices {}
// SAFETY: as for `Sync`.
unsafe impl Send for AbiHostServices {}

/// `size_of::<AbiHostServices>()` in this copy of the API.
pub const SERVICES_SIZE: u32 = size_of::<AbiHostServices>() as u32;

/// [`crate::Level::Error`].
pub const LEVEL_ERROR: u32 = 1;
/// [`crate::Level::Warn`].
pub const LEVEL_WARN: u32 = 2;
/// [`crate::Level::Info`].
pub const LEVEL_INFO: u32 = 3;
/// [`crate::Level::Debug`].
pub const LEVEL_DEBUG: u32 = 4;
/// [`crate::Level::Trace`].
pub const LEVEL_TRACE: u32 = 5;

/// [`crate::MetricKind::Counter`].
pub const METRIC_COUNTER: u32 = 1;
/// [`crate::MetricKind::Gauge`].
pub const METRIC_GAUGE: u32 = 2;
/// [`crate::MetricKind::Histogram`].
pub const METRIC_HISTOGRAM: u32 = 3;
