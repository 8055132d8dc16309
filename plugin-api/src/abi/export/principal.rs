//! Principal builders: a panic or an error fails that authentication.

use std::ffi::c_void;
use std::net::IpAddr;

use super::super::codec;
use super::super::layout::{
    AbiAuthenticationContext, AbiBytes, AbiHostServices, AbiSink, PluginExport, PluginKind,
    PrincipalBuilderTable, PART_ERROR, PART_SECOND, PART_VALUE, STATUS_ERROR, STATUS_OK,
    STATUS_PANICKED,
};
use super::super::sink::emit;
use super::{contain, export, instance};
use crate::host::Host;
use crate::plugin::Plugin;
use crate::principal::{AuthenticationContext, PrincipalBuilder, PrincipalError, TlsPeer};
use crate::sasl::Authenticated;

/// Plugin `T`'s export entry.
pub const fn entry<T: Plugin + PrincipalBuilder>() -> PluginExport {
    export::<T>(
        PluginKind::PrincipalBuilder,
        (Tables::<T>::TABLE as *const PrincipalBuilderTable).cast::<c_void>(),
    )
}

struct Tables<T>(std::marker::PhantomData<T>);

impl<T: Plugin + PrincipalBuilder> Tables<T> {
    const TABLE: &'static PrincipalBuilderTable = &PrincipalBuilderTable {
        table_size: super::super::layout::table_size(PluginKind::PrincipalBuilder),
        create: Some(create::<T>),
        build: Some(build::<T>),
    };
}

unsafe extern "C" fn create<T: Plugin + PrincipalBuilder>(
    config: AbiBytes,
    services: *const AbiHostServices,
    out: *mut *const c_void,
    error: *const AbiSink,
) -> u32 {
    // SAFETY: the ABI's `create` arguments, forwarded.
    unsafe { super::create::<T, T>(config, services, out, error, |plugin, _host: Host| plugin) }
}

/// The owned pieces an [`AuthenticationContext`] borrows.
struct Owned {
    sasl: Option<(Authenticated, String)>,
    tls: Option<TlsPeer>,
    address: IpAddr,
    listener: String,
}

/// Copies the host's context (`Err` names what was malformed).
///
/// # Safety
///
/// Every byte view in `context` is borrowed from the host for the call.
unsafe fn owned(context: &AbiAuthenticationContext) -> Result<Owned, &'static str> {
    // SAFETY: forwarded from the caller.
    let text = |bytes: AbiBytes, what| unsafe { bytes.as_str() }.map(str::to_owned).ok_or(what);
    let sasl = if context.has_sasl == 0 {
        None
    } else {
        let mut authenticated =
            Authenticated::new(text(context.sasl_authorization_id, "authorization id")?);
        if context.sasl_has_token_id != 0 {
            authenticated.token_id = Some(text(context.sasl_token_id, "token id")?);
        }
        if context.sasl_has_credential_expiry != 0 {
            authenticated.credential_expiry_ms = Some(context.sasl_credential_expiry_ms);
        }
        // SAFETY: forwarded from the caller.
        let extensions = unsafe { context.sasl_extensions.as_slice() }.ok_or("extensions")?;
        authenticated.extensions =
            codec::decode_string_map(extensions).map_err(|_| "extensions")?;
        Some((authenticated, text(context.sasl_mechanism, "mechanism")?))
    };
    let tls = if context.has_tls == 0 {
        None
    } else {
        let subject = match context.tls_has_subject {
            0 => None,
            _ => Some(text(context.tls_subject, "certificate subject")?),
        };
        // SAFETY: forwarded from the caller.
        let chain = unsafe { context.tls_certificates.as_slice() }.ok_or("certificates")?;
        let certificates = codec::decode_byte_list(chain).map_err(|_| "certificates")?;
        Some(TlsPeer::new(certificates, subject))
    };
    Ok(Owned {
        sasl,
        tls,
        address: IpAddr::from(context.address),
        listener: text(context.listener, "listener")?,
    })
}

unsafe extern "C" fn build<T: Plugin + PrincipalBuilder>(
    instance_ptr: *const c_void,
    context: *const AbiAuthenticationContext,
    sink: *const AbiSink,
) -> u32 {
    // `Err(message)`: the builder panicked.
    let built: Result<Result<_, PrincipalError>, String> = contain(
        || {
            // SAFETY: what `create::<T>` returned, or null; the context is the host's, or null.
            let (Some(builder), Some(context)) = (unsafe { instance::<T>(instance_ptr) }, unsafe {
                context.as_ref()
            }) else {
                return Ok(Err(PrincipalError::Failed {
                    reason: "no instance or context".to_owned(),
                }));
            };
            // SAFETY: borrowed from the host for the call.
            let owned = match unsafe { owned(context) } {
                Ok(owned) => owned,
                Err(what) => {
                    return Ok(Err(PrincipalError::Failed {
                        reason: format!("the host passed a malformed {what}"),
                    }))
                }
            };
            let context = match (&owned.sasl, &owned.tls) {
                (Some((authenticated, mechanism)), tls) => AuthenticationContext::sasl(
                    authenticated,
                    mechanism,
                    owned.address,
                    &owned.listener,
                )
                .with_tls(tls.as_ref()),
                (None, Some(tls)) => {
                    AuthenticationContext::tls_only(tls, owned.address, &owned.listener)
                }
                (None, None) => {
                    return Ok(Err(PrincipalError::Unavailable {
                        reason: "neither SASL nor TLS authenticated the connection".to_owned(),
                    }))
                }
            };
            Ok(builder.build(&context))
        },
        Err,
    );
    contain(
        || match built {
            Ok(Ok(principal)) => {
                // SAFETY: the host's sink, for this call.
                unsafe {
                    emit(sink, PART_VALUE, principal.kind.as_bytes());
                    emit(sink, PART_SECOND, principal.name.as_bytes());
                }
                STATUS_OK
            }
            Ok(Err(error)) => {
                // SAFETY: the host's sink, for this call.
                unsafe { emit(sink, PART_ERROR, &codec::encode_principal_error(&error)) };
                STATUS_ERROR
            }
            Err(message) => {
                let error = PrincipalError::Failed {
                    reason: format!("the principal builder panicked: {message}"),
                };
                // SAFETY: the host's sink, for this call.
                unsafe { emit(sink, PART_ERROR, &codec::encode_principal_error(&error)) };
                STATUS_PANICKED
            }
        },
        |_| STATUS_PANICKED,
    )
}
