//! The plugin side: the generic `extern "C"` functions behind [`crate::export_sasl_mechanism!`].
//!
//! Each export wraps its whole body in `catch_unwind`: unwinding out of an `extern "C"` function
//! aborts the process, and a plugin's bug must not take the host down with it. A panic inside a
//! mechanism's `step` becomes a hidden failure and poisons that exchange.

use std::any::Any;
use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::extensions;
use super::layout::{
    AbiBuf, AbiBytes, AbiExchangeContext, AbiStepResult, PluginDeclaration, PluginKind,
    SaslMechanismTable, ADDRESS_FAMILY_V4, ADDRESS_FAMILY_V6, CREATE_ERROR, CREATE_OK,
    CREATE_PANICKED, DECLARATION_SIZE, FLAG_PANIC_UNWIND, OUTCOME_COMPLETE, OUTCOME_CONTINUE,
    OUTCOME_FAIL_HIDDEN, OUTCOME_FAIL_VISIBLE, SASL_TABLE_SIZE,
};
use super::{FixedStr, PLUGIN_MAGIC, RUSTC_VERSION};
use crate::sasl::{AuthFailure, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};

/// A SASL mechanism that can be exported from a `cdylib` with [`crate::export_sasl_mechanism!`].
///
/// ```ignore
/// impl MechanismPlugin for MyMechanism {
///     const PLUGIN_NAME: &'static str = "MY-MECHANISM";
///     fn from_config(config: &str) -> Result<Self, String> {
///         let config = portcullis::abi::PluginConfig::parse(config).map_err(|e| e.to_string())?;
///         /* ... */
///     }
/// }
/// ```
pub trait MechanismPlugin: SaslMechanism + Sized + 'static {
    /// The plugin's name (at most 63 bytes, checked at compile time): the key of its
    /// configuration table, `[plugins.config.<PLUGIN_NAME>]`, and how the host reports it.
    const PLUGIN_NAME: &'static str;

    /// Builds the mechanism from its configuration: the TOML text of the plugin's config table,
    /// empty when there is none ([`super::PluginConfig`] parses it). An error refuses the plugin,
    /// and the message is shown to the operator.
    fn from_config(config: &str) -> Result<Self, String>;
}

/// The function table for `T`.
pub const fn sasl_mechanism_table<T: MechanismPlugin>() -> SaslMechanismTable {
    SaslMechanismTable {
        table_size: SASL_TABLE_SIZE,
        create: Some(create::<T>),
        mechanism_name: Some(mechanism_name::<T>),
        start: Some(start::<T>),
        step: Some(step),
        free_exchange: Some(free_exchange),
    }
}

/// The declaration for `T`, pointing to `table`.
pub const fn sasl_mechanism_declaration<T: MechanismPlugin>(
    table: &'static SaslMechanismTable,
    abi_version: u32,
) -> PluginDeclaration {
    // Evaluated in a `static` initializer, so a failure is a compile error in the plugin crate.
    assert!(
        !T::PLUGIN_NAME.is_empty() && FixedStr::<64>::fits(T::PLUGIN_NAME),
        "MechanismPlugin::PLUGIN_NAME must be 1 to 63 bytes long"
    );
    PluginDeclaration {
        magic: PLUGIN_MAGIC,
        abi_version,
        decl_size: DECLARATION_SIZE,
        framework_version: FixedStr::truncated(crate::FRAMEWORK_VERSION),
        rustc_version: FixedStr::truncated(RUSTC_VERSION),
        name: FixedStr::truncated(T::PLUGIN_NAME),
        kind: PluginKind::SaslMechanism.code(),
        flags: if cfg!(panic = "unwind") {
            FLAG_PANIC_UNWIND
        } else {
            0
        },
        table: (table as *const SaslMechanismTable).cast::<c_void>(),
    }
}

/// What `create` hands the host: the mechanism and its name, kept so that `mechanism_name` can
/// return a pointer that stays valid (instances are never freed).
struct Instance<T> {
    mechanism: T,
    name: String,
}

/// A plugin-side exchange and the buffers its last [`AbiStepResult`] points into.
struct Exchange {
    state: ExchangeState,
    /// The last outcome, kept alive until the next call so the host can copy it.
    last: StepOutcome,
    /// The encoded extensions of `last`, when it is `Complete`.
    last_extensions: Vec<u8>,
}

enum ExchangeState {
    /// Waiting for the client's next token.
    Running(Box<dyn SaslExchange>),
    /// Completed or failed; further steps fail.
    Finished,
    /// The mechanism panicked; its state may be broken, so it is never stepped again.
    Poisoned,
}

/// The panic message, for logs. The payload is leaked rather than dropped: a payload whose `Drop`
/// panics would otherwise unwind out of the export.
fn panic_message(payload: Box<dyn Any + Send>) -> String {
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

/// Copies as much of `message` as fits, at a character boundary, into the host's buffer.
///
/// # Safety
///
/// `buf` is null or points to an [`AbiBuf`] whose `ptr` is null or valid for `capacity` writes.
unsafe fn write_message(buf: *mut AbiBuf, message: &str) {
    // SAFETY: the caller guarantees `buf` is null or valid; `as_mut` checks for null.
    let Some(buf) = (unsafe { buf.as_mut() }) else {
        return;
    };
    if buf.ptr.is_null() {
        buf.len = 0;
        return;
    }
    let mut len = message.len().min(buf.capacity);
    while !message.is_char_boundary(len) {
        len -= 1;
    }
    // SAFETY: `buf.ptr` is valid for `capacity` ≥ `len` writes (caller), the source is `len`
    // readable bytes of `message`, and a host buffer cannot overlap the plugin's string.
    unsafe { std::ptr::copy_nonoverlapping(message.as_ptr(), buf.ptr, len) };
    buf.len = len;
}

unsafe extern "C" fn create<T: MechanismPlugin>(
    config: AbiBytes,
    instance: *mut *const c_void,
    error: *mut AbiBuf,
) -> u32 {
    let built = catch_unwind(AssertUnwindSafe(|| -> Result<*const c_void, String> {
        // SAFETY: the host passes its configuration text, borrowed for this call.
        let bytes = unsafe { config.as_slice() }.ok_or("malformed configuration buffer")?;
        let text = std::str::from_utf8(bytes).map_err(|_| "configuration is not UTF-8")?;
        let mechanism = T::from_config(text)?;
        let name = mechanism.name().to_owned();
        // Leaked on purpose: the library is never unloaded, so neither is its instance.
        let leaked: *const Instance<T> = Box::into_raw(Box::new(Instance { mechanism, name }));
        Ok(leaked.cast::<c_void>())
    }));
    let (status, message) = match built {
        Ok(Ok(created)) => {
            if instance.is_null() {
                return CREATE_ERROR;
            }
            // SAFETY: non-null, and the host passes a pointer to its own output slot.
            unsafe { instance.write(created) };
            return CREATE_OK;
        }
        Ok(Err(message)) => (CREATE_ERROR, message),
        Err(payload) => (CREATE_PANICKED, panic_message(payload)),
    };
    // SAFETY: the host passes a pointer to its own error buffer (or null).
    unsafe { write_message(error, &message) };
    status
}

unsafe extern "C" fn mechanism_name<T: MechanismPlugin>(instance: *const c_void) -> AbiBytes {
    catch_unwind(|| {
        // SAFETY: `instance` is null or what `create::<T>` returned: a leaked, never-mutated
        // `Instance<T>`, so a shared reference to it is valid forever.
        match unsafe { instance.cast::<Instance<T>>().as_ref() } {
            Some(instance) => AbiBytes::from_slice(instance.name.as_bytes()),
            None => AbiBytes::EMPTY,
        }
    })
    .unwrap_or_else(|payload| {
        drop(panic_message(payload));
        AbiBytes::EMPTY
    })
}

/// Rebuilds the framework's context from its C form.
fn exchange_context(context: &AbiExchangeContext) -> ExchangeContext {
    let [a, b, c, d, ..] = context.address;
    let address = match context.address_family {
        ADDRESS_FAMILY_V6 => IpAddr::V6(Ipv6Addr::from(context.address)),
        ADDRESS_FAMILY_V4 => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    // SAFETY: the listener name is borrowed from the host for the duration of `start`.
    let listener = unsafe { context.listener.as_slice() }.unwrap_or_default();
    ExchangeContext::new(
        address,
        String::from_utf8_lossy(listener).into_owned(),
        context.now_ms,
    )
}

unsafe extern "C" fn start<T: MechanismPlugin>(
    instance: *const c_void,
    context: *const AbiExchangeContext,
) -> *mut c_void {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: see `mechanism_name`: a leaked `Instance<T>` from `create::<T>`, or null.
        // `T: Sync` (a `SaslMechanism` bound), so concurrent `start`s are fine.
        let instance = unsafe { instance.cast::<Instance<T>>().as_ref() };
        // SAFETY: the host passes a context it owns for the duration of this call, or null.
        let context = unsafe { context.as_ref() };
        let (Some(instance), Some(context)) = (instance, context) else {
            return std::ptr::null_mut();
        };
        let exchange = Exchange {
            state: ExchangeState::Running(instance.mechanism.start(&exchange_context(context))),
            last: StepOutcome::Continue(Vec::new()),
            last_extensions: Vec::new(),
        };
        Box::into_raw(Box::new(exchange)).cast::<c_void>()
    }))
    .unwrap_or_else(|payload| {
        drop(panic_message(payload));
        std::ptr::null_mut()
    })
}

impl Exchange {
    /// Runs the mechanism's step, turning a panic into a hidden failure and poisoning the exchange.
    fn advance(&mut self, input: Option<&[u8]>) {
        let state = std::mem::replace(&mut self.state, ExchangeState::Poisoned);
        self.last_extensions.clear();
        let outcome = match (state, input) {
            (ExchangeState::Running(mut inner), Some(input)) => {
                match catch_unwind(AssertUnwindSafe(|| inner.step(input))) {
                    Ok(outcome) => {
                        if matches!(outcome, StepOutcome::Continue(_)) {
                            self.state = ExchangeState::Running(inner);
                        } else {
                            self.state = ExchangeState::Finished;
                        }
                        outcome
                    }
                    Err(payload) => {
                        // `inner` may be half-updated; it is dropped here and the exchange stays
                        // poisoned. Its Drop could panic too: leak it instead.
                        std::mem::forget(inner);
                        hidden(format!(
                            "the mechanism panicked during a step: {}",
                            panic_message(payload)
                        ))
                    }
                }
            }
            (ExchangeState::Running(_), None) => {
                self.state = ExchangeState::Finished;
                hidden("the host passed a malformed input buffer".to_owned())
            }
            (ExchangeState::Finished, _) => {
                self.state = ExchangeState::Finished;
                hidden("step called after the exchange finished".to_owned())
            }
            (ExchangeState::Poisoned, _) => {
                hidden("step called after the mechanism panicked".to_owned())
            }
        };
        if let StepOutcome::Complete(authenticated) = &outcome {
            self.last_extensions = extensions::encode(&authenticated.extensions);
        }
        self.last = outcome;
    }

    /// The C view of `last`, borrowing this exchange's buffers.
    fn result(&self) -> AbiStepResult {
        let mut result = AbiStepResult::UNSET;
        match &self.last {
            StepOutcome::Continue(bytes) => {
                result.outcome = OUTCOME_CONTINUE;
                result.bytes = AbiBytes::from_slice(bytes);
            }
            StepOutcome::Complete(authenticated) => {
                result.outcome = OUTCOME_COMPLETE;
                result.bytes = AbiBytes::from_slice(&authenticated.server_final);
                result.authorization_id =
                    AbiBytes::from_slice(authenticated.authorization_id.as_bytes());
                if let Some(expiry) = authenticated.credential_expiry_ms {
                    result.has_credential_expiry = 1;
                    result.credential_expiry_ms = expiry;
                }
                if let Some(token_id) = &authenticated.token_id {
                    result.has_token_id = 1;
                    result.token_id = AbiBytes::from_slice(token_id.as_bytes());
                }
                result.extensions = AbiBytes::from_slice(&self.last_extensions);
            }
            StepOutcome::Fail(AuthFailure::Visible(message)) => {
                result.outcome = OUTCOME_FAIL_VISIBLE;
                result.bytes = AbiBytes::from_slice(message.as_bytes());
            }
            StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
                result.outcome = OUTCOME_FAIL_HIDDEN;
                result.bytes = AbiBytes::from_slice(reason.as_bytes());
            }
            _ => result.outcome = OUTCOME_FAIL_HIDDEN,
        }
        result
    }
}

fn hidden(reason: String) -> StepOutcome {
    StepOutcome::Fail(AuthFailure::Hidden(reason))
}

/// The result written when even the bookkeeping around a step panicked.
static STEP_PANICKED: &str = "the plugin panicked while reporting a step result";

unsafe extern "C" fn step(exchange: *mut c_void, input: AbiBytes, out: *mut AbiStepResult) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `exchange` is null or what `start` returned, and the host never overlaps calls
        // on one exchange, so this is the only reference.
        let exchange = unsafe { exchange.cast::<Exchange>().as_mut() }?;
        // SAFETY: the host lends the client's token for the duration of this call.
        let input = unsafe { input.as_slice() };
        exchange.advance(input);
        Some(exchange.result())
    }));
    let result = match result {
        Ok(Some(result)) => result,
        // Null exchange: leave `out` as the host pre-filled it (unset, which fails).
        Ok(None) => return,
        Err(payload) => {
            drop(panic_message(payload));
            let mut result = AbiStepResult::UNSET;
            result.outcome = OUTCOME_FAIL_HIDDEN;
            result.bytes = AbiBytes::from_slice(STEP_PANICKED.as_bytes());
            result
        }
    };
    if !out.is_null() {
        // SAFETY: non-null, and the host passes a pointer to its own result slot.
        unsafe { out.write(result) };
    }
}

unsafe extern "C" fn free_exchange(exchange: *mut c_void) {
    if exchange.is_null() {
        return;
    }
    let freed = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `exchange` came from `Box::into_raw` in `start` and the host frees it once.
        drop(unsafe { Box::from_raw(exchange.cast::<Exchange>()) });
    }));
    if let Err(payload) = freed {
        drop(panic_message(payload));
    }
}
