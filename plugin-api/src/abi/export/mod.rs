//! The plugin side: the generic `extern "C"` functions behind [`crate::export_plugins!`], one
//! module per kind, and what they share (instance creation, panic containment, the declaration).
//!
//! Every exported function runs the plugin's code inside `catch_unwind`: unwinding out of an
//! `extern "C"` function aborts the process, and a plugin's bug must not take the host down with
//! it. What a panic turns into is each kind's business (a failed step, a denial, a refused
//! request, a skipped event); the host is told, with the panic's message where there is room.

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::layout::{
    AbiBytes, AbiHostServices, AbiSink, FixedStr, PluginDeclaration, PluginExport, PluginKind,
    DECLARATION_SIZE, FLAG_PANIC_UNWIND, PART_ERROR, STATUS_ERROR, STATUS_OK, STATUS_PANICKED,
};
use super::sink::emit;
use super::{codec, services, PLUGIN_MAGIC, RUSTC_VERSION, SERVICES_VERSION};
use crate::host::Host;
use crate::plugin::{self, Plugin, PluginError};

pub mod authorizer;
pub mod events;
pub mod forwarding;
pub mod login;
pub mod principal;
pub mod sasl;
mod scratch;

/// The declaration of a library exporting `exports`.
pub const fn declaration(exports: &'static [PluginExport], abi_version: u32) -> PluginDeclaration {
    // Evaluated in a `static` initializer, so a failure is a compile error in the plugin crate.
    assert!(
        !exports.is_empty(),
        "export_plugins! needs at least one plugin"
    );
    PluginDeclaration {
        magic: PLUGIN_MAGIC,
        abi_version,
        decl_size: DECLARATION_SIZE,
        api_version: FixedStr::truncated(crate::API_VERSION),
        rustc_version: FixedStr::truncated(RUSTC_VERSION),
        flags: if cfg!(panic = "unwind") {
            FLAG_PANIC_UNWIND
        } else {
            0
        },
        services_version: SERVICES_VERSION,
        export_count: exports.len() as u32,
        reserved: 0,
        exports: exports.as_ptr(),
    }
}

/// One export entry for plugin `T` of `kind` with its table.
pub(crate) const fn export<T: Plugin>(kind: PluginKind, table: *const c_void) -> PluginExport {
    // Evaluated in a `static` initializer, so a failure is a compile error in the plugin crate.
    assert!(
        !T::NAME.is_empty() && FixedStr::<64>::fits(T::NAME),
        "Plugin::NAME must be 1 to 63 bytes long"
    );
    PluginExport {
        kind: kind.code(),
        reserved: 0,
        name: FixedStr::truncated(T::NAME),
        table,
    }
}

/// The panic message, for logs. The payload is leaked rather than dropped: a payload whose `Drop`
/// panics would otherwise unwind out of the export.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    };
    std::mem::forget(payload);
    message
}

/// Runs `body`, turning a panic into `on_panic(message)`.
pub(crate) fn contain<R>(body: impl FnOnce() -> R, on_panic: impl FnOnce(String) -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => on_panic(panic_message(payload)),
    }
}

/// Runs a call that reports failures through a sink: `Ok` is [`STATUS_OK`] (or the status the
/// body returns), `Err(message)` is [`STATUS_ERROR`], a panic [`STATUS_PANICKED`]; the message
/// goes to [`PART_ERROR`].
///
/// # Safety
///
/// `sink` is null or valid for the duration of the call (see [`emit`]).
pub(crate) unsafe fn reported(
    sink: *const AbiSink,
    body: impl FnOnce() -> Result<u32, String>,
) -> u32 {
    let (status, message) = contain(
        || match body() {
            Ok(status) => (status, None),
            Err(message) => (STATUS_ERROR, Some(message)),
        },
        |message| (STATUS_PANICKED, Some(message)),
    );
    if let Some(message) = message {
        // Even writing the message must not unwind into the host.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: forwarded from the caller.
            unsafe { emit(sink, PART_ERROR, message.as_bytes()) }
        }));
    }
    status
}

/// A shared reference to a leaked instance.
///
/// # Safety
///
/// `instance` is null or what `create` returned for this `I` (a leaked, never-freed `Box<I>`).
pub(crate) unsafe fn instance<'a, I>(instance: *const c_void) -> Option<&'a I> {
    // SAFETY: forwarded from the caller; instances are never freed or mutated.
    unsafe { instance.cast::<I>().as_ref() }
}

/// How a `create` call ended.
enum Created {
    /// The instance.
    Instance(*const c_void),
    /// The plugin refused its configuration, or its input was malformed.
    Refused(PluginError),
    /// The plugin panicked.
    Panicked(String),
}

/// Creates an instance of plugin `T`: parses its configuration, builds it with the imported host
/// services, and leaks `wrap(plugin, host)` (instances live as long as the library, which is
/// never unloaded).
///
/// # Safety
///
/// The pointers are what the ABI says of [`super::layout::CreateFn`]'s arguments.
pub(crate) unsafe fn create<T: Plugin, I: Send + Sync + 'static>(
    config: AbiBytes,
    services: *const AbiHostServices,
    instance: *mut *const c_void,
    error: *const AbiSink,
    wrap: fn(T, Host) -> I,
) -> u32 {
    let created = contain(
        || {
            // SAFETY: the host passes its configuration text, borrowed for this call.
            let Some(text) = (unsafe { config.as_str() }) else {
                return Created::Refused(PluginError::startup("the configuration is not UTF-8"));
            };
            // SAFETY: the host's services table, valid forever (`CreateFn`).
            let host = Host::new(unsafe { services::import(services) });
            match plugin::build::<T>(text, &host) {
                Ok(plugin) => {
                    let leaked: *mut I = Box::into_raw(Box::new(wrap(plugin, host)));
                    Created::Instance(leaked.cast::<c_void>().cast_const())
                }
                Err(refused) => Created::Refused(refused),
            }
        },
        Created::Panicked,
    );
    let (status, part) = match created {
        Created::Instance(created) => {
            if instance.is_null() {
                return STATUS_ERROR;
            }
            // SAFETY: non-null, and the host passes a pointer to its own output slot.
            unsafe { instance.write(created) };
            return STATUS_OK;
        }
        Created::Refused(refused) => (STATUS_ERROR, codec::encode_plugin_error(&refused)),
        Created::Panicked(message) => (STATUS_PANICKED, message.into_bytes()),
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the host passes its own sink (or null) for this call.
        unsafe { emit(error, PART_ERROR, &part) }
    }));
    status
}
