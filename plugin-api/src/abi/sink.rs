//! Both ends of an [`AbiSink`]: the caller's collector, which copies each part the callee writes,
//! and the callee's [`emit`].

use std::ffi::c_void;

use super::layout::{AbiBytes, AbiSink, PART_ERROR, PART_SECOND, PART_VALUE};

/// What a callee wrote into a sink, copied.
#[derive(Debug, Default)]
pub struct Parts {
    /// [`PART_VALUE`].
    pub value: Option<Vec<u8>>,
    /// [`PART_SECOND`].
    pub second: Option<Vec<u8>>,
    /// [`PART_ERROR`].
    pub error: Option<Vec<u8>>,
}

impl Parts {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// A sink that writes into `self`; valid while `self` is neither moved nor dropped.
    pub fn sink(&mut self) -> AbiSink {
        AbiSink {
            context: (self as *mut Parts).cast::<c_void>(),
            write: Some(collect),
        }
    }

    /// The error part as text (lossy), or `default`.
    pub fn error_text(&self, default: &str) -> String {
        match &self.error {
            Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            None => default.to_owned(),
        }
    }
}

/// The collector's write function: copies the part (a later write of the same part replaces it).
unsafe extern "C" fn collect(context: *mut c_void, part: u32, bytes: AbiBytes) {
    // SAFETY: `context` is the `Parts` that made this sink (`Parts::sink`), alive and not aliased
    // for the duration of the call the sink was passed to.
    let Some(parts) = (unsafe { context.cast::<Parts>().as_mut() }) else {
        return;
    };
    // SAFETY: the callee lends the bytes for the duration of this call.
    let Some(bytes) = (unsafe { bytes.as_slice() }) else {
        return;
    };
    let slot = match part {
        PART_VALUE => &mut parts.value,
        PART_SECOND => &mut parts.second,
        PART_ERROR => &mut parts.error,
        _ => return,
    };
    *slot = Some(bytes.to_vec());
}

/// Writes one part to `sink` (nothing if the sink or its function is null).
///
/// # Safety
///
/// `sink` is null or points to a valid [`AbiSink`] whose `write` may be called with its
/// `context` (the caller of the function that received the sink keeps it valid for that call).
pub unsafe fn emit(sink: *const AbiSink, part: u32, bytes: &[u8]) {
    // SAFETY: null is checked by `as_ref`; otherwise valid (caller).
    let Some(sink) = (unsafe { sink.as_ref() }) else {
        return;
    };
    if let Some(write) = sink.write {
        // SAFETY: the sink's own function with its own context; the bytes outlive the call.
        unsafe { write(sink.context, part, AbiBytes::from_slice(bytes)) };
    }
}
