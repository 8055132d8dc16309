//! SASL mechanisms: a panic inside a mechanism's `step` becomes a hidden failure and poisons that
//! exchange; a panic in `start` fails the exchange.

use std::ffi::c_void;
use std::net::IpAddr;

use super::super::codec;
use super::super::layout::{
    AbiBytes, AbiExchangeContext, AbiHostServices, AbiSink, AbiStepResult, PluginExport,
    PluginKind, SaslMechanismTable, OUTCOME_COMPLETE, OUTCOME_CONTINUE, OUTCOME_FAIL_HIDDEN,
    OUTCOME_FAIL_VISIBLE,
};
use super::{contain, export, instance};
use crate::credentials::CredentialId;
use crate::host::Host;
use crate::plugin::Plugin;
use crate::sasl::{AuthFailure, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};

/// What `create` leaks: the mechanism and its name, kept so that `mechanism_name` can return a
/// pointer that stays valid (instances are never freed).
struct Instance<T> {
    mechanism: T,
    name: String,
}

/// Plugin `T`'s export entry.
pub const fn entry<T: Plugin + SaslMechanism>() -> PluginExport {
    export::<T>(
        PluginKind::SaslMechanism,
        (Tables::<T>::TABLE as *const SaslMechanismTable).cast::<c_void>(),
    )
}

struct Tables<T>(std::marker::PhantomData<T>);

impl<T: Plugin + SaslMechanism> Tables<T> {
    const TABLE: &'static SaslMechanismTable = &SaslMechanismTable {
        table_size: super::super::layout::table_size(PluginKind::SaslMechanism),
        create: Some(create::<T>),
        mechanism_name: Some(mechanism_name::<T>),
        start: Some(start::<T>),
        step: Some(step),
        free_exchange: Some(free_exchange),
    };
}

unsafe extern "C" fn create<T: Plugin + SaslMechanism>(
    config: AbiBytes,
    services: *const AbiHostServices,
    out: *mut *const c_void,
    error: *const AbiSink,
) -> u32 {
    // SAFETY: the ABI's `create` arguments, forwarded.
    unsafe {
        super::create::<T, Instance<T>>(config, services, out, error, |mechanism, _host: Host| {
            let name = mechanism.name().to_owned();
            Instance { mechanism, name }
        })
    }
}

unsafe extern "C" fn mechanism_name<T: Plugin + SaslMechanism>(
    instance_ptr: *const c_void,
) -> AbiBytes {
    contain(
        || {
            // SAFETY: what `create::<T>` returned, or null.
            match unsafe { instance::<Instance<T>>(instance_ptr) } {
                Some(instance) => AbiBytes::from_text(&instance.name),
                None => AbiBytes::EMPTY,
            }
        },
        |_| AbiBytes::EMPTY,
    )
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

unsafe extern "C" fn start<T: Plugin + SaslMechanism>(
    instance_ptr: *const c_void,
    context: *const AbiExchangeContext,
) -> *mut c_void {
    contain(
        || {
            // SAFETY: what `create::<T>` returned, or null. `T: Sync` (a `SaslMechanism` bound),
            // so concurrent `start`s are fine.
            let instance = unsafe { instance::<Instance<T>>(instance_ptr) };
            // SAFETY: the host passes a context it owns for the duration of this call, or null.
            let context = unsafe { context.as_ref() };
            let (Some(instance), Some(context)) = (instance, context) else {
                return std::ptr::null_mut();
            };
            // SAFETY: the listener name is borrowed from the host for the duration of `start`.
            let listener = unsafe { context.listener.as_slice() }.unwrap_or_default();
            let exchange_context = ExchangeContext::new(
                IpAddr::from(context.address),
                String::from_utf8_lossy(listener).into_owned(),
                context.now_ms,
            );
            let exchange = Exchange {
                state: ExchangeState::Running(instance.mechanism.start(&exchange_context)),
                last: StepOutcome::Continue(Vec::new()),
                last_extensions: Vec::new(),
            };
            Box::into_raw(Box::new(exchange)).cast::<c_void>()
        },
        |_| std::ptr::null_mut(),
    )
}

fn hidden(reason: String) -> StepOutcome {
    StepOutcome::Fail(AuthFailure::Hidden(reason))
}

impl Exchange {
    /// Runs the mechanism's step, turning a panic into a hidden failure and poisoning the exchange.
    fn advance(&mut self, input: Option<&[u8]>) {
        let state = std::mem::replace(&mut self.state, ExchangeState::Poisoned);
        self.last_extensions.clear();
        let outcome = match (state, input) {
            (ExchangeState::Running(mut inner), Some(input)) => {
                let stepped = contain(|| Ok(inner.step(input)), Err);
                match stepped {
                    Ok(outcome) => {
                        if matches!(outcome, StepOutcome::Continue(_)) {
                            self.state = ExchangeState::Running(inner);
                        } else {
                            self.state = ExchangeState::Finished;
                        }
                        outcome
                    }
                    Err(message) => {
                        // `inner` may be half-updated; the exchange stays poisoned. Its Drop
                        // could panic too: leak it instead.
                        std::mem::forget(inner);
                        hidden(format!("the mechanism panicked during a step: {message}"))
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
            self.last_extensions = codec::encode_string_map(&authenticated.extensions);
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
                result.authorization_id = AbiBytes::from_text(&authenticated.authorization_id);
                if let Some(expiry) = authenticated.credential_expiry_ms {
                    result.has_credential_expiry = 1;
                    result.credential_expiry_ms = expiry;
                }
                if let Some(token_id) = &authenticated.token_id {
                    result.has_token_id = 1;
                    result.token_id = AbiBytes::from_text(token_id);
                }
                // Only a key of the plugin's own crosses: a dynamic mechanism cannot claim a
                // stored SCRAM credential or a token as what verified the client.
                if let Some(CredentialId::Plugin { key, .. }) = &authenticated.credential {
                    result.has_credential_key = 1;
                    result.credential_key = AbiBytes::from_text(key);
                }
                result.extensions = AbiBytes::from_slice(&self.last_extensions);
            }
            StepOutcome::Fail(AuthFailure::Visible(message)) => {
                result.outcome = OUTCOME_FAIL_VISIBLE;
                result.bytes = AbiBytes::from_text(message);
            }
            StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
                result.outcome = OUTCOME_FAIL_HIDDEN;
                result.bytes = AbiBytes::from_text(reason);
            }
        }
        result
    }
}

/// The result written when even the bookkeeping around a step panicked.
static STEP_PANICKED: &str = "the plugin panicked while reporting a step result";

unsafe extern "C" fn step(exchange: *mut c_void, input: AbiBytes, out: *mut AbiStepResult) {
    let result = contain(
        || {
            // SAFETY: `exchange` is null or what `start` returned, and the host never overlaps
            // calls on one exchange, so this is the only reference.
            let exchange = unsafe { exchange.cast::<Exchange>().as_mut() }?;
            // SAFETY: the host lends the client's token for the duration of this call.
            let input = unsafe { input.as_slice() };
            exchange.advance(input);
            Some(exchange.result())
        },
        |_| {
            let mut result = AbiStepResult::UNSET;
            result.outcome = OUTCOME_FAIL_HIDDEN;
            result.bytes = AbiBytes::from_text(STEP_PANICKED);
            Some(result)
        },
    );
    // Null exchange: leave `out` as the host pre-filled it (unset, which fails).
    let Some(result) = result else { return };
    if !out.is_null() {
        // SAFETY: non-null, and the host passes a pointer to its own result slot.
        unsafe { out.write(result) };
    }
}

unsafe extern "C" fn free_exchange(exchange: *mut c_void) {
    if exchange.is_null() {
        return;
    }
    contain(
        || {
            // SAFETY: `exchange` came from `Box::into_raw` in `start` and the host frees it once.
            drop(unsafe { Box::from_raw(exchange.cast::<Exchange>()) });
        },
        drop,
    );
}
