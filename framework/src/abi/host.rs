//! The host side's safe wrapper: a validated function table and plugin instance presented as an
//! ordinary [`SaslMechanism`], and its exchanges as ordinary [`SaslExchange`]s. Everything the
//! plugin returns is copied into host-owned values before the next call, and checked (UTF-8,
//! null pointers, known outcome codes) so that a misbehaving plugin yields a failed
//! authentication, not undefined behaviour in the host.

use std::ffi::c_void;
use std::net::IpAddr;
use std::ptr::NonNull;

use super::extensions;
use super::layout::{
    AbiBytes, AbiExchangeContext, AbiStepResult, CreateFn, FreeExchangeFn, MechanismNameFn,
    StartFn, StepFn, ADDRESS_FAMILY_V4, ADDRESS_FAMILY_V6, OUTCOME_COMPLETE, OUTCOME_CONTINUE,
    OUTCOME_FAIL_HIDDEN, OUTCOME_FAIL_VISIBLE, OUTCOME_UNSET,
};
use super::AbiError;
use crate::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};

/// The non-null functions of a validated [`super::SaslMechanismTable`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct SaslFunctions {
    pub(crate) create: CreateFn,
    pub(crate) mechanism_name: MechanismNameFn,
    pub(crate) start: StartFn,
    pub(crate) step: StepFn,
    pub(crate) free_exchange: FreeExchangeFn,
}

/// A SASL mechanism provided by a dynamic plugin. Build one with
/// [`super::ValidatedPlugin::create_sasl_mechanism`].
pub struct DynamicMechanism {
    plugin_name: String,
    mechanism_name: String,
    functions: SaslFunctions,
    /// The plugin's instance; never freed, like the library that owns it.
    instance: NonNull<c_void>,
}

// SAFETY: the instance is a `T: SaslMechanism` (which is `Send + Sync`) behind the export macro's
// functions, which only take shared references to it; the function pointers are plain code.
unsafe impl Send for DynamicMechanism {}
// SAFETY: as for `Send`: concurrent `start` calls reach `&T` with `T: Sync`.
unsafe impl Sync for DynamicMechanism {}

impl std::fmt::Debug for DynamicMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicMechanism")
            .field("plugin", &self.plugin_name)
            .field("mechanism", &self.mechanism_name)
            .finish_non_exhaustive()
    }
}

impl DynamicMechanism {
    /// Wraps an instance, reading and checking its mechanism name.
    ///
    /// # Safety
    ///
    /// `functions` come from a validated table of a library that is never unloaded, and
    /// `instance` is what its `create` returned.
    pub(crate) unsafe fn new(
        plugin_name: String,
        functions: SaslFunctions,
        instance: *const c_void,
    ) -> Result<Self, AbiError> {
        let instance = NonNull::new(instance.cast_mut()).ok_or(AbiError::BadCreateStatus {
            status: super::layout::CREATE_OK,
        })?;
        // SAFETY: a validated function called with the instance its `create` returned.
        let name = unsafe { (functions.mechanism_name)(instance.as_ptr()) };
        // SAFETY: the name is owned by the instance, which is never freed or mutated.
        let name = unsafe { name.as_slice() }
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .filter(|name| !name.is_empty())
            .ok_or(AbiError::BadMechanismName)?;
        Ok(Self {
            plugin_name,
            mechanism_name: name.to_owned(),
            functions,
            instance,
        })
    }

    /// The name of the plugin that provides this mechanism.
    pub fn plugin_name(&self) -> &str {
        &self.plugin_name
    }
}

impl SaslMechanism for DynamicMechanism {
    fn name(&self) -> &str {
        &self.mechanism_name
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange> {
        let (address_family, address) = match context.client_address {
            IpAddr::V4(v4) => {
                let mut address = [0u8; 16];
                for (slot, byte) in address.iter_mut().zip(v4.octets()) {
                    *slot = byte;
                }
                (ADDRESS_FAMILY_V4, address)
            }
            IpAddr::V6(v6) => (ADDRESS_FAMILY_V6, v6.octets()),
        };
        let abi_context = AbiExchangeContext {
            address_family,
            reserved: 0,
            address,
            now_ms: context.now_ms,
            listener: AbiBytes::from_slice(context.listener.as_bytes()),
        };
        // SAFETY: a validated function, our instance, and a context (and listener bytes) that
        // outlive the call.
        let handle = unsafe { (self.functions.start)(self.instance.as_ptr(), &abi_context) };
        let state = match NonNull::new(handle) {
            Some(handle) => State::Running(handle),
            None => State::StartFailed,
        };
        Box::new(DynamicExchange {
            mechanism: self.mechanism_name.clone(),
            functions: self.functions,
            state,
        })
    }
}

/// One exchange of a [`DynamicMechanism`].
struct DynamicExchange {
    mechanism: String,
    functions: SaslFunctions,
    state: State,
}

/// Where an exchange is; the plugin's exchange exists only while `Running`.
enum State {
    /// The plugin's exchange, waiting for the next client token.
    Running(NonNull<c_void>),
    /// The plugin could not start the exchange (it panicked).
    StartFailed,
    /// Completed or failed; the plugin's exchange has been freed.
    Finished,
}

// SAFETY: the plugin's exchange is a `Box<dyn SaslExchange>` (which is `Send`) reached only
// through `&mut self`, so it is used by one thread at a time.
unsafe impl Send for DynamicExchange {}

impl DynamicExchange {
    fn hidden(&self, reason: &str) -> StepOutcome {
        StepOutcome::Fail(AuthFailure::Hidden(format!(
            "plugin mechanism {}: {reason}",
            self.mechanism
        )))
    }

    /// Frees the plugin's exchange, if it still exists.
    fn release(&mut self) {
        if let State::Running(handle) = std::mem::replace(&mut self.state, State::Finished) {
            // SAFETY: a validated function and a handle from its `start`, freed exactly once
            // (the state no longer holds it).
            unsafe { (self.functions.free_exchange)(handle.as_ptr()) };
        }
    }

    /// Copies a step result out of the plugin's buffers.
    ///
    /// # Safety
    ///
    /// `result` was written by the plugin's `step` and no call on the exchange happened since.
    unsafe fn read_result(&self, result: &AbiStepResult) -> StepOutcome {
        // SAFETY: the plugin owns these buffers until the next call on the exchange (caller).
        let read = |bytes: AbiBytes| unsafe { bytes.as_slice() };
        let Some(bytes) = read(result.bytes) else {
            return self.hidden("the plugin returned a malformed buffer");
        };
        match result.outcome {
            OUTCOME_CONTINUE => StepOutcome::Continue(bytes.to_vec()),
            OUTCOME_FAIL_VISIBLE => StepOutcome::Fail(AuthFailure::Visible(
                String::from_utf8_lossy(bytes).into_owned(),
            )),
            OUTCOME_FAIL_HIDDEN => self.hidden(&String::from_utf8_lossy(bytes)),
            OUTCOME_COMPLETE => {
                let text = |bytes: AbiBytes| {
                    read(bytes).and_then(|b| std::str::from_utf8(b).ok().map(str::to_owned))
                };
                let Some(authorization_id) = text(result.authorization_id) else {
                    return self.hidden("the plugin returned a malformed authorization id");
                };
                let token_id = match result.has_token_id {
                    0 => None,
                    _ => match text(result.token_id) {
                        Some(token_id) => Some(token_id),
                        None => return self.hidden("the plugin returned a malformed token id"),
                    },
                };
                let extensions = match read(result.extensions).map(extensions::decode) {
                    Some(Ok(extensions)) => extensions,
                    Some(Err(e)) => return self.hidden(&format!("the plugin's {e}")),
                    None => {
                        return self.hidden("the plugin returned a malformed extensions buffer")
                    }
                };
                let expiry =
                    (result.has_credential_expiry != 0).then_some(result.credential_expiry_ms);
                StepOutcome::Complete(
                    Authenticated::new(authorization_id)
                        .with_server_final(bytes.to_vec())
                        .with_credential_expiry_ms(expiry)
                        .with_token_id(token_id)
                        .with_extensions(extensions),
                )
            }
            OUTCOME_UNSET => self.hidden("the plugin did not report a step result"),
            other => self.hidden(&format!("the plugin returned unknown outcome {other}")),
        }
    }
}

impl SaslExchange for DynamicExchange {
    fn step(&mut self, client_token: &[u8]) -> StepOutcome {
        let handle = match self.state {
            State::Running(handle) => handle,
            State::StartFailed => {
                self.state = State::Finished;
                return self.hidden("the plugin failed to start the exchange");
            }
            State::Finished => return self.hidden("step called after the exchange finished"),
        };
        let mut result = AbiStepResult::UNSET;
        // SAFETY: a validated function, a live handle from its `start` (only we hold it, and
        // `&mut self` keeps calls from overlapping), input bytes that outlive the call, and our
        // own result slot.
        unsafe {
            (self.functions.step)(
                handle.as_ptr(),
                AbiBytes::from_slice(client_token),
                &mut result,
            )
        };
        // SAFETY: written by that `step`, read before any other call on the exchange.
        let outcome = unsafe { self.read_result(&result) };
        if !matches!(outcome, StepOutcome::Continue(_)) {
            // Finished either way: free the plugin's state now rather than when the host drops us.
            self.release();
        }
        outcome
    }
}

impl Drop for DynamicExchange {
    fn drop(&mut self) {
        self.release();
    }
}
