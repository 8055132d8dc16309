//! A dynamic login module as a [`LoginModule`], its own client exchanges as
//! [`SaslClientExchange`]s.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use portcullis_plugin_api::abi::codec;
use portcullis_plugin_api::abi::sink::Parts;

use super::super::tables::LoginFunctions;
use super::super::{
    AbiBytes, CredentialFn, CLIENT_DONE, CLIENT_TOKEN, START_CUSTOM, START_PASSWORD, STATUS_OK,
};
use super::{owned_name, CreateError, Instance};
use crate::login::{
    ClientExchange, ExpiringCredential, LoginError, LoginModule, SaslClientExchange,
};
use crate::secret::Secret;

/// A login module provided by a dynamic plugin.
pub struct DynamicLogin {
    plugin: Arc<str>,
    mechanism: String,
    functions: LoginFunctions,
    instance: Instance,
    /// The last credential the plugin reported, for when asking again fails.
    last: Mutex<ExpiringCredential>,
}

impl std::fmt::Debug for DynamicLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicLogin")
            .field("plugin", &self.plugin)
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

impl DynamicLogin {
    /// Wraps an instance, reading its mechanism and first credential.
    ///
    /// # Safety
    ///
    /// `functions` come from a validated table of a library that is never unloaded, and
    /// `instance` is what its `create` returned.
    pub(crate) unsafe fn new(
        plugin: Arc<str>,
        functions: LoginFunctions,
        instance: Instance,
    ) -> Result<Self, CreateError> {
        // SAFETY: forwarded from the caller.
        let mechanism = unsafe { owned_name(functions.mechanism, instance, "mechanism name") }?;
        // SAFETY: forwarded from the caller.
        let first = unsafe { call_credential(functions.credential, instance) }
            .map_err(|e| CreateError::Broken(format!("could not report its credential: {e}")))?;
        Ok(Self {
            plugin,
            mechanism,
            functions,
            instance,
            last: Mutex::new(first),
        })
    }

    fn error(&self, message: impl std::fmt::Display) -> LoginError {
        LoginError(format!("login module plugin {}: {message}", self.plugin))
    }
}

/// Calls `credential` or `refresh`.
///
/// # Safety
///
/// A validated function of the instance's table, and the instance.
unsafe fn call_credential(
    function: CredentialFn,
    instance: Instance,
) -> Result<ExpiringCredential, String> {
    let mut parts = Parts::new();
    let sink = parts.sink();
    // SAFETY: forwarded from the caller; the sink outlives the call.
    let status = unsafe { function(instance.as_ptr(), &sink) };
    if status != STATUS_OK {
        return Err(parts.error_text("failed"));
    }
    let value = parts.value.ok_or_else(|| "reported nothing".to_owned())?;
    codec::decode_expiring_credential(&value).map_err(|e| e.to_string())
}

impl LoginModule for DynamicLogin {
    fn mechanism(&self) -> &str {
        &self.mechanism
    }

    fn credential(&self) -> ExpiringCredential {
        // SAFETY: our validated function and instance.
        match unsafe { call_credential(self.functions.credential, self.instance) } {
            Ok(credential) => {
                *self.last.lock().unwrap_or_else(PoisonError::into_inner) = credential.clone();
                credential
            }
            Err(message) => {
                tracing::warn!(plugin = %self.plugin, %message, "login module plugin could not report its credential; using the last one");
                self.last
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            }
        }
    }

    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        // SAFETY: our validated function and instance.
        let credential = unsafe { call_credential(self.functions.refresh, self.instance) }
            .map_err(|message| self.error(message))?;
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = credential.clone();
        Ok(credential)
    }

    fn start(&self) -> Result<ClientExchange, LoginError> {
        let mut parts = Parts::new();
        let sink = parts.sink();
        let mut exchange: *mut c_void = std::ptr::null_mut();
        // SAFETY: a validated function, our instance, and a sink and slot that outlive the call.
        let status =
            unsafe { (self.functions.start)(self.instance.as_ptr(), &sink, &mut exchange) };
        match status {
            START_PASSWORD => {
                let username = parts
                    .value
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| self.error("gave no user name"))?;
                let password = parts
                    .second
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| self.error("gave no password"))?;
                Ok(ClientExchange::Password {
                    username,
                    password: Secret::new(password),
                })
            }
            START_CUSTOM => {
                let handle =
                    NonNull::new(exchange).ok_or_else(|| self.error("gave no exchange"))?;
                Ok(ClientExchange::Custom(Box::new(DynamicClientExchange {
                    plugin: Arc::clone(&self.plugin),
                    functions: self.functions,
                    handle,
                })))
            }
            _ => Err(self.error(parts.error_text("could not start a login"))),
        }
    }
}

/// A client exchange of a dynamic login module.
struct DynamicClientExchange {
    plugin: Arc<str>,
    functions: LoginFunctions,
    handle: NonNull<c_void>,
}

// SAFETY: the plugin's exchange is a `Box<dyn SaslClientExchange>` (`Send`) reached only through
// `&mut self` (or `&self` for the read-only `is_complete`), one thread at a time.
unsafe impl Send for DynamicClientExchange {}

impl DynamicClientExchange {
    fn answer(&self, status: u32, parts: Parts) -> Result<Option<Vec<u8>>, LoginError> {
        match status {
            CLIENT_TOKEN => Ok(Some(parts.value.unwrap_or_default())),
            CLIENT_DONE => Ok(None),
            _ => Err(LoginError(format!(
                "login module plugin {}: {}",
                self.plugin,
                parts.error_text("the client exchange failed")
            ))),
        }
    }
}

impl SaslClientExchange for DynamicClientExchange {
    fn initial(&mut self) -> Result<Vec<u8>, LoginError> {
        let mut parts = Parts::new();
        let sink = parts.sink();
        // SAFETY: a validated function, our live handle (calls never overlap: `&mut self`), and
        // a sink that outlives the call.
        let status = unsafe { (self.functions.client_initial)(self.handle.as_ptr(), &sink) };
        Ok(self.answer(status, parts)?.unwrap_or_default())
    }

    fn step(&mut self, server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError> {
        let mut parts = Parts::new();
        let sink = parts.sink();
        // SAFETY: as for `initial`; the token outlives the call.
        let status = unsafe {
            (self.functions.client_step)(
                self.handle.as_ptr(),
                AbiBytes::from_slice(server_token),
                &sink,
            )
        };
        self.answer(status, parts)
    }

    fn is_complete(&self) -> bool {
        // SAFETY: a validated function and our live handle.
        unsafe { (self.functions.client_is_complete)(self.handle.as_ptr()) == 1 }
    }
}

impl Drop for DynamicClientExchange {
    fn drop(&mut self) {
        // SAFETY: a validated function and the handle its `start` returned, freed exactly once.
        unsafe { (self.functions.free_client_exchange)(self.handle.as_ptr()) };
    }
}
