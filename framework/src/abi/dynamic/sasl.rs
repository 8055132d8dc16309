//! A dynamic SASL mechanism as a [`SaslMechanism`], its exchanges as [`SaslExchange`]s.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use portcullis_plugin_api::abi::codec;

use super::super::tables::SaslFunctions;
use super::super::{
    AbiBytes, AbiExchangeContext, AbiStepResult, OUTCOME_COMPLETE, OUTCOME_CONTINUE,
    OUTCOME_FAIL_HIDDEN, OUTCOME_FAIL_VISIBLE, OUTCOME_UNSET,
};
use super::{owned_name, CreateError, Instance};
use crate::credentials::CredentialId;
use crate::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};

/// A SASL mechanism provided by a dynamic plugin.
pub struct DynamicMechanism {
    plugin: Arc<str>,
    mechanism_name: String,
    functions: SaslFunctions,
    instance: Instance,
}

impl std::fmt::Debug for DynamicMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicMechanism")
            .field("plugin", &self.plugin)
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
        plugin: Arc<str>,
        functions: SaslFunctions,
        instance: Instance,
    ) -> Result<Self, CreateError> {
        // SAFETY: forwarded from the caller.
        let mechanism_name =
            unsafe { owned_name(functions.mechanism_name, instance, "mechanism name") }?;
        Ok(Self {
            plugin,
            mechanism_name,
            functions,
            instance,
        })
    }

    /// The name of the plugin that provides this mechanism.
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }
}

impl SaslMechanism for DynamicMechanism {
    fn name(&self) -> &str {
        &self.mechanism_name
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange> {
        let abi_context = AbiExchangeContext {
            address: context.client_address.into(),
            now_ms: context.now_ms,
            listener: AbiBytes::from_text(&context.listener),
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
                let extensions = match read(result.extensions).map(codec::decode_string_map) {
                    Some(Ok(extensions)) => extensions,
                    Some(Err(e)) => return self.hidden(&format!("the plugin's extensions: {e}")),
                    None => {
                        return self.hidden("the plugin returned a malformed extensions buffer")
                    }
                };
                let expiry =
                    (result.has_credential_expiry != 0).then_some(result.credential_expiry_ms);
                let mut authenticated = Authenticated::new(authorization_id)
                    .with_server_final(bytes.to_vec())
                    .with_credential_expiry_ms(expiry)
                    .with_token_id(token_id)
                    .with_extensions(extensions);
                if result.has_credential_key != 0 {
                    let Some(key) = text(result.credential_key) else {
                        return self.hidden("the plugin returned a malformed credential key");
                    };
                    authenticated = authenticated
                        .with_credential(CredentialId::plugin(self.mechanism.clone(), key));
                }
                StepOutcome::Complete(authenticated)
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
