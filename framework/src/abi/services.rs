//! The host side of the services table: a [`HostServices`] (the host's, one per plugin so that
//! its log lines carry the plugin's name) exported as an [`AbiHostServices`] a dynamic plugin can
//! call. Every function catches panics: a host bug must not unwind through the plugin's frames.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use portcullis_plugin_api::abi::codec;
use portcullis_plugin_api::abi::sink::emit;

use super::{
    AbiBytes, AbiHostServices, AbiSink, LEVEL_DEBUG, LEVEL_ERROR, LEVEL_INFO, LEVEL_WARN,
    METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM, PART_VALUE, SERVICES_SIZE, SERVICES_VERSION,
};
use crate::host::{HostServices, Level, MetricKind};

/// The table for `services`, valid (and never freed) for the rest of the process, like the
/// plugins that hold it.
pub fn export_services(services: Arc<dyn HostServices>) -> &'static AbiHostServices {
    let context: *mut Arc<dyn HostServices> = Box::into_raw(Box::new(services));
    Box::leak(Box::new(AbiHostServices {
        version: SERVICES_VERSION,
        size: SERVICES_SIZE,
        context: context.cast::<c_void>().cast_const(),
        log: Some(log),
        log_enabled: Some(log_enabled),
        now_ms: Some(now_ms),
        scram_credential: Some(scram_credential),
        token: Some(token),
        token_without_extension: Some(token_without_extension),
        publish_metric: Some(publish_metric),
        span_enter: Some(span_enter),
        span_exit: Some(span_exit),
    }))
}

/// The services behind a context.
///
/// # Safety
///
/// `context` is null or the context of a table made by [`export_services`] (never freed).
unsafe fn services<'a>(context: *const c_void) -> Option<&'a dyn HostServices> {
    // SAFETY: forwarded from the caller.
    let services = unsafe { context.cast::<Arc<dyn HostServices>>().as_ref() }?;
    Some(services.as_ref())
}

fn level(code: u32) -> Level {
    match code {
        LEVEL_ERROR => Level::Error,
        LEVEL_WARN => Level::Warn,
        LEVEL_INFO => Level::Info,
        LEVEL_DEBUG => Level::Debug,
        _ => Level::Trace,
    }
}

/// Runs host code called by a plugin, turning a panic into `fallback`.
fn guarded<R>(fallback: R, body: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

unsafe extern "C" fn log(context: *const c_void, level_code: u32, message: AbiBytes) {
    guarded((), || {
        // SAFETY: our context; the plugin lends the message for the call.
        let (services, message) = unsafe { (services(context), message.as_slice()) };
        if let (Some(services), Some(message)) = (services, message) {
            services.log(level(level_code), &String::from_utf8_lossy(message));
        }
    })
}

unsafe extern "C" fn log_enabled(context: *const c_void, level_code: u32) -> u32 {
    guarded(0, || {
        // SAFETY: our context.
        match unsafe { services(context) } {
            Some(services) => u32::from(services.log_enabled(level(level_code))),
            None => 0,
        }
    })
}

unsafe extern "C" fn now_ms(context: *const c_void) -> i64 {
    guarded(0, || {
        // SAFETY: our context.
        unsafe { services(context) }.map_or(0, |services| services.now_ms())
    })
}

unsafe extern "C" fn scram_credential(
    context: *const c_void,
    user: AbiBytes,
    mechanism: u32,
    sink: *const AbiSink,
) -> u32 {
    guarded(0, || {
        // SAFETY: our context; the plugin lends the name for the call.
        let (services, user) = unsafe { (services(context), user.as_str()) };
        let (Some(services), Some(user)) = (services, user) else {
            return 0;
        };
        let Some(mechanism) = codec::scram_from_code(mechanism) else {
            return 0;
        };
        match services.credentials().scram(user, mechanism) {
            Some(credential) => {
                // SAFETY: the plugin's sink, valid for this call.
                unsafe {
                    emit(
                        sink,
                        PART_VALUE,
                        &codec::encode_scram_credential(&credential),
                    )
                };
                1
            }
            None => 0,
        }
    })
}

unsafe extern "C" fn token(
    context: *const c_void,
    token_id: AbiBytes,
    mechanism: u32,
    sink: *const AbiSink,
) -> u32 {
    guarded(0, || {
        // SAFETY: our context; the plugin lends the id for the call.
        let (services, token_id) = unsafe { (services(context), token_id.as_str()) };
        let (Some(services), Some(token_id)) = (services, token_id) else {
            return 0;
        };
        let Some(mechanism) = codec::scram_from_code(mechanism) else {
            return 0;
        };
        match services.tokens().token(token_id, mechanism) {
            Some(token) => {
                // SAFETY: the plugin's sink, valid for this call.
                unsafe { emit(sink, PART_VALUE, &codec::encode_token_credential(&token)) };
                1
            }
            None => 0,
        }
    })
}

unsafe extern "C" fn token_without_extension(context: *const c_void, name: AbiBytes) -> u32 {
    guarded(0, || {
        // SAFETY: our context; the plugin lends the name for the call.
        let looked_up = unsafe { (services(context), name.as_str()) };
        match looked_up {
            (Some(services), Some(name)) => {
                u32::from(services.tokens().accepts_token_without_extension(name))
            }
            _ => 0,
        }
    })
}

unsafe extern "C" fn publish_metric(context: *const c_void, kind: u32, name: AbiBytes, value: f64) {
    guarded((), || {
        let kind = match kind {
            METRIC_COUNTER => MetricKind::Counter,
            METRIC_GAUGE => MetricKind::Gauge,
            METRIC_HISTOGRAM => MetricKind::Histogram,
            _ => return,
        };
        // SAFETY: our context; the plugin lends the name for the call.
        let (services, name) = unsafe { (services(context), name.as_str()) };
        if let (Some(services), Some(name)) = (services, name) {
            services.publish_metric(kind, name, value);
        }
    })
}

unsafe extern "C" fn span_enter(context: *const c_void, name: AbiBytes) -> u64 {
    guarded(0, || {
        // SAFETY: our context; the plugin lends the name for the call.
        let (services, name) = unsafe { (services(context), name.as_str()) };
        match (services, name) {
            (Some(services), Some(name)) => services.span_enter(name),
            _ => 0,
        }
    })
}

unsafe extern "C" fn span_exit(context: *const c_void, handle: u64) {
    guarded((), || {
        // SAFETY: our context.
        if let Some(services) = unsafe { services(context) } {
            services.span_exit(handle);
        }
    })
}
