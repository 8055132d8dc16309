//! Login modules: a panic fails that call (the host keeps the current credential, or fails that
//! upstream authentication); a panicking client exchange is never stepped again.

use std::ffi::c_void;

use super::super::codec;
use super::super::layout::{
    AbiBytes, AbiHostServices, AbiSink, LoginModuleTable, PluginExport, PluginKind, CLIENT_DONE,
    CLIENT_TOKEN, PART_SECOND, PART_VALUE, START_CUSTOM, START_PASSWORD, STATUS_OK,
};
use super::super::sink::emit;
use super::{contain, export, instance, reported};
use crate::host::Host;
use crate::login::{ClientExchange, LoginModule, SaslClientExchange};
use crate::plugin::Plugin;

/// What `create` leaks: the module and its mechanism name.
struct Instance<T> {
    module: T,
    mechanism: String,
}

/// Plugin `T`'s export entry.
pub const fn entry<T: Plugin + LoginModule>() -> PluginExport {
    export::<T>(
        PluginKind::LoginModule,
        (Tables::<T>::TABLE as *const LoginModuleTable).cast::<c_void>(),
    )
}

struct Tables<T>(std::marker::PhantomData<T>);

impl<T: Plugin + LoginModule> Tables<T> {
    const TABLE: &'static LoginModuleTable = &LoginModuleTable {
        table_size: super::super::layout::table_size(PluginKind::LoginModule),
        create: Some(create::<T>),
        mechanism: Some(mechanism::<T>),
        credential: Some(credential::<T>),
        refresh: Some(refresh::<T>),
        start: Some(start::<T>),
        client_initial: Some(client_initial),
        client_step: Some(client_step),
        client_is_complete: Some(client_is_complete),
        free_client_exchange: Some(free_client_exchange),
    };
}

unsafe extern "C" fn create<T: Plugin + LoginModule>(
    config: AbiBytes,
    services: *const AbiHostServices,
    out: *mut *const c_void,
    error: *const AbiSink,
) -> u32 {
    // SAFETY: the ABI's `create` arguments, forwarded.
    unsafe {
        super::create::<T, Instance<T>>(config, services, out, error, |module, _host: Host| {
            let mechanism = module.mechanism().to_owned();
            Instance { module, mechanism }
        })
    }
}

unsafe extern "C" fn mechanism<T: Plugin + LoginModule>(instance_ptr: *const c_void) -> AbiBytes {
    contain(
        // SAFETY: what `create::<T>` returned, or null.
        || match unsafe { instance::<Instance<T>>(instance_ptr) } {
            Some(instance) => AbiBytes::from_text(&instance.mechanism),
            None => AbiBytes::EMPTY,
        },
        |_| AbiBytes::EMPTY,
    )
}

/// The instance, or an error message.
///
/// # Safety
///
/// `instance_ptr` is null or what `create::<T>` returned.
unsafe fn module<'a, T: Plugin + LoginModule>(
    instance_ptr: *const c_void,
) -> Result<&'a Instance<T>, String> {
    // SAFETY: forwarded from the caller.
    unsafe { instance::<Instance<T>>(instance_ptr) }.ok_or_else(|| "no instance".to_owned())
}

unsafe extern "C" fn credential<T: Plugin + LoginModule>(
    instance_ptr: *const c_void,
    sink: *const AbiSink,
) -> u32 {
    let body = || {
        // SAFETY: forwarded.
        let instance = unsafe { module::<T>(instance_ptr) }?;
        let encoded = codec::encode_expiring_credential(&instance.module.credential());
        // SAFETY: the host's sink, for this call.
        unsafe { emit(sink, PART_VALUE, &encoded) };
        Ok(STATUS_OK)
    };
    // SAFETY: the host's sink, for this call.
    unsafe { reported(sink, body) }
}

unsafe extern "C" fn refresh<T: Plugin + LoginModule>(
    instance_ptr: *const c_void,
    sink: *const AbiSink,
) -> u32 {
    let body = || {
        // SAFETY: forwarded.
        let instance = unsafe { module::<T>(instance_ptr) }?;
        let credential = instance.module.refresh().map_err(|e| e.to_string())?;
        let encoded = codec::encode_expiring_credential(&credential);
        // SAFETY: the host's sink, for this call.
        unsafe { emit(sink, PART_VALUE, &encoded) };
        Ok(STATUS_OK)
    };
    // SAFETY: the host's sink, for this call.
    unsafe { reported(sink, body) }
}

/// A client exchange of the plugin's own; poisoned once it panicked.
struct Client {
    exchange: Option<Box<dyn SaslClientExchange>>,
}

unsafe extern "C" fn start<T: Plugin + LoginModule>(
    instance_ptr: *const c_void,
    sink: *const AbiSink,
    exchange_out: *mut *mut c_void,
) -> u32 {
    let body = || {
        // SAFETY: forwarded.
        let instance = unsafe { module::<T>(instance_ptr) }?;
        match instance.module.start().map_err(|e| e.to_string())? {
            ClientExchange::Password { username, password } => {
                // SAFETY: the host's sink, for this call.
                unsafe {
                    emit(sink, PART_VALUE, username.as_bytes());
                    emit(sink, PART_SECOND, password.expose().as_bytes());
                }
                Ok(START_PASSWORD)
            }
            ClientExchange::Custom(exchange) => {
                if exchange_out.is_null() {
                    return Err("no exchange slot".to_owned());
                }
                let client = Box::into_raw(Box::new(Client {
                    exchange: Some(exchange),
                }));
                // SAFETY: non-null, the host's own slot.
                unsafe { exchange_out.write(client.cast::<c_void>()) };
                Ok(START_CUSTOM)
            }
        }
    };
    // SAFETY: the host's sink, for this call.
    unsafe { reported(sink, body) }
}

/// Runs `f` on a client exchange, poisoning it if `f` panics.
///
/// # Safety
///
/// `exchange` is null or what `start` returned, not freed, and calls on it never overlap.
unsafe fn with_client(
    exchange: *mut c_void,
    sink: *const AbiSink,
    f: impl FnOnce(&mut dyn SaslClientExchange) -> Result<Option<Vec<u8>>, String>,
) -> u32 {
    // SAFETY: forwarded from the caller: the only reference to the exchange.
    let Some(client) = (unsafe { exchange.cast::<Client>().as_mut() }) else {
        return super::super::layout::STATUS_ERROR;
    };
    let body = || {
        let mut inner = client
            .exchange
            .take()
            .ok_or_else(|| "the exchange panicked before".to_owned())?;
        let result = f(inner.as_mut());
        // Reached only without a panic: a panicking exchange stays taken (poisoned).
        client.exchange = Some(inner);
        match result? {
            Some(token) => {
                // SAFETY: the host's sink, for this call.
                unsafe { emit(sink, PART_VALUE, &token) };
                Ok(CLIENT_TOKEN)
            }
            None => Ok(CLIENT_DONE),
        }
    };
    // SAFETY: the host's sink, for this call.
    unsafe { reported(sink, body) }
}

unsafe extern "C" fn client_initial(exchange: *mut c_void, sink: *const AbiSink) -> u32 {
    // SAFETY: forwarded from the host (`ClientInitialFn`).
    unsafe {
        with_client(exchange, sink, |client| {
            client.initial().map(Some).map_err(|e| e.to_string())
        })
    }
}

unsafe extern "C" fn client_step(
    exchange: *mut c_void,
    token: AbiBytes,
    sink: *const AbiSink,
) -> u32 {
    // SAFETY: forwarded from the host (`ClientStepFn`); the token is lent for the call.
    unsafe {
        with_client(exchange, sink, |client| {
            let token = token
                .as_slice()
                .ok_or_else(|| "malformed server token".to_owned())?;
            client.step(token).map_err(|e| e.to_string())
        })
    }
}

unsafe extern "C" fn client_is_complete(exchange: *mut c_void) -> u32 {
    contain(
        || {
            // SAFETY: null or what `start` returned; calls never overlap.
            match unsafe { exchange.cast::<Client>().as_ref() } {
                Some(Client {
                    exchange: Some(inner),
                }) => u32::from(inner.is_complete()),
                _ => 0,
            }
        },
        |_| 0,
    )
}

unsafe extern "C" fn free_client_exchange(exchange: *mut c_void) {
    if exchange.is_null() {
        return;
    }
    contain(
        || {
            // SAFETY: from `Box::into_raw` in `start`; the host frees it once.
            drop(unsafe { Box::from_raw(exchange.cast::<Client>()) });
        },
        drop,
    );
}
