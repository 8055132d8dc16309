//! Authorizers: a panic denies every action of that call (fail closed) and the host logs it;
//! the next call runs normally. The request path allocates nothing here (see `scratch`).

use std::ffi::c_void;

use super::super::codec;
use super::super::layout::{
    AbiAction, AbiAuthorization, AbiBytes, AbiHostServices, AbiRequestContext, AbiSink,
    AuthorizerTable, PluginExport, PluginKind, DECISION_ALLOWED, DECISION_DENIED, PART_VALUE,
    RULE_DEFAULT_ALLOW, RULE_DEFAULT_DENY, RULE_PLUGIN, RULE_SUPER_USER, STATUS_ERROR, STATUS_OK,
    STATUS_PANICKED,
};
use super::super::sink::emit;
use super::scratch::{read_context, with_request};
use super::{contain, export, instance, reported};
use crate::acl::{AclOperation, ResourceType};
use crate::authorizer::{AclAdmin, Authorization, Authorizer, DecidingRule, Decision};
use crate::host::Host;
use crate::plugin::Plugin;

/// Plugin `T`'s export entry.
pub const fn entry<T: Plugin + Authorizer>() -> PluginExport {
    export::<T>(
        PluginKind::Authorizer,
        (Tables::<T>::TABLE as *const AuthorizerTable).cast::<c_void>(),
    )
}

struct Tables<T>(std::marker::PhantomData<T>);

impl<T: Plugin + Authorizer> Tables<T> {
    const TABLE: &'static AuthorizerTable = &AuthorizerTable {
        table_size: super::super::layout::table_size(PluginKind::Authorizer),
        create: Some(create::<T>),
        authorize: Some(authorize::<T>),
        authorize_by_resource_type: Some(authorize_by_resource_type::<T>),
        has_acl_admin: Some(has_acl_admin::<T>),
        create_acls: Some(create_acls::<T>),
        delete_acls: Some(delete_acls::<T>),
        describe_acls: Some(describe_acls::<T>),
    };
}

unsafe extern "C" fn create<T: Plugin + Authorizer>(
    config: AbiBytes,
    services: *const AbiHostServices,
    out: *mut *const c_void,
    error: *const AbiSink,
) -> u32 {
    // SAFETY: the ABI's `create` arguments, forwarded.
    unsafe { super::create::<T, T>(config, services, out, error, |plugin, _host: Host| plugin) }
}

/// The C form of an answer.
#[inline]
fn answer(authorization: &Authorization) -> AbiAuthorization {
    let decision = if authorization.is_allowed() {
        DECISION_ALLOWED
    } else {
        DECISION_DENIED
    };
    let rule = match authorization.rule {
        DecidingRule::DefaultDeny => RULE_DEFAULT_DENY,
        DecidingRule::DefaultAllow => RULE_DEFAULT_ALLOW,
        DecidingRule::SuperUser => RULE_SUPER_USER,
        _ => RULE_PLUGIN,
    };
    AbiAuthorization { decision, rule }
}

unsafe extern "C" fn authorize<T: Plugin + Authorizer>(
    instance_ptr: *const c_void,
    context: *const AbiRequestContext,
    actions: *const AbiAction,
    count: usize,
    out: *mut AbiAuthorization,
) -> u32 {
    contain(
        || {
            // SAFETY: what `create::<T>` returned (`T: Sync`), or null.
            let Some(authorizer) = (unsafe { instance::<T>(instance_ptr) }) else {
                return STATUS_ERROR;
            };
            // SAFETY: the host lends the context for the call, or passes null.
            let Some(context) = (unsafe { read_context(context) }) else {
                return STATUS_ERROR;
            };
            if count > 0 && (actions.is_null() || out.is_null()) {
                return STATUS_ERROR;
            }
            let (actions, out) = if count == 0 {
                (&[][..], &mut [][..])
            } else {
                // SAFETY: non-null, and the host passes arrays of `count` elements it owns for
                // the call (`AuthorizeFn`), the output not aliased by anything else.
                unsafe {
                    (
                        std::slice::from_raw_parts(actions, count),
                        std::slice::from_raw_parts_mut(out, count),
                    )
                }
            };
            // SAFETY: every view inside is borrowed from the host for the call.
            let done = unsafe {
                with_request(&context, actions, |request, actions| {
                    authorizer.authorize_each(request, actions, &mut |i, authorization| {
                        if let Some(slot) = out.get_mut(i) {
                            *slot = answer(&authorization);
                        }
                    });
                })
            };
            match done {
                Some(()) => STATUS_OK,
                None => STATUS_ERROR,
            }
        },
        |_| STATUS_PANICKED,
    )
}

unsafe extern "C" fn authorize_by_resource_type<T: Plugin + Authorizer>(
    instance_ptr: *const c_void,
    context: *const AbiRequestContext,
    operation: i32,
    resource_type: i32,
) -> u32 {
    let code = |value: i32| i8::try_from(value).unwrap_or(0);
    contain(
        || {
            // SAFETY: as for `authorize`.
            let (Some(authorizer), Some(context)) =
                (unsafe { instance::<T>(instance_ptr) }, unsafe {
                    read_context(context)
                })
            else {
                return DECISION_DENIED;
            };
            // SAFETY: borrowed from the host for the call.
            let decision = unsafe {
                with_request(&context, &[], |request, _| {
                    authorizer.authorize_by_resource_type(
                        request,
                        AclOperation::from_code(code(operation)),
                        ResourceType::from_code(code(resource_type)),
                    )
                })
            };
            match decision {
                Some(Decision::Allowed) => DECISION_ALLOWED,
                _ => DECISION_DENIED,
            }
        },
        |_| DECISION_DENIED,
    )
}

unsafe extern "C" fn has_acl_admin<T: Plugin + Authorizer>(instance_ptr: *const c_void) -> u32 {
    contain(
        // SAFETY: what `create::<T>` returned, or null.
        || match unsafe { instance::<T>(instance_ptr) } {
            Some(authorizer) => u32::from(authorizer.acl_admin().is_some()),
            None => 0,
        },
        |_| 0,
    )
}

/// Runs an ACL call on the instance's admin, encoding its result into [`PART_VALUE`].
///
/// # Safety
///
/// The ABI's [`super::super::layout::AclCallFn`] arguments.
unsafe fn acl_call<T: Plugin + Authorizer>(
    instance_ptr: *const c_void,
    input: AbiBytes,
    sink: *const AbiSink,
    call: impl FnOnce(&dyn AclAdmin, &[u8]) -> Result<Vec<u8>, String>,
) -> u32 {
    let body = || {
        // SAFETY: what `create::<T>` returned, or null.
        let authorizer =
            unsafe { instance::<T>(instance_ptr) }.ok_or_else(|| "no instance".to_owned())?;
        let admin = authorizer
            .acl_admin()
            .ok_or_else(|| "this authorizer stores no ACLs".to_owned())?;
        // SAFETY: the host lends the input for the call.
        let input =
            unsafe { input.as_slice() }.ok_or_else(|| "malformed input buffer".to_owned())?;
        let output = call(admin, input)?;
        // SAFETY: the host's sink, for this call.
        unsafe { emit(sink, PART_VALUE, &output) };
        Ok(STATUS_OK)
    };
    // SAFETY: the sink is the host's, for this call.
    unsafe { reported(sink, body) }
}

unsafe extern "C" fn create_acls<T: Plugin + Authorizer>(
    instance_ptr: *const c_void,
    input: AbiBytes,
    sink: *const AbiSink,
) -> u32 {
    // SAFETY: forwarded.
    unsafe {
        acl_call::<T>(instance_ptr, input, sink, |admin, input| {
            let bindings = codec::decode_bindings(input).map_err(|e| e.to_string())?;
            Ok(codec::encode_create_results(&admin.create_acls(&bindings)))
        })
    }
}

unsafe extern "C" fn delete_acls<T: Plugin + Authorizer>(
    instance_ptr: *const c_void,
    input: AbiBytes,
    sink: *const AbiSink,
) -> u32 {
    // SAFETY: forwarded.
    unsafe {
        acl_call::<T>(instance_ptr, input, sink, |admin, input| {
            let filters = codec::decode_filters(input).map_err(|e| e.to_string())?;
            Ok(codec::encode_delete_result(&admin.delete_acls(&filters)))
        })
    }
}

unsafe extern "C" fn describe_acls<T: Plugin + Authorizer>(
    instance_ptr: *const c_void,
    input: AbiBytes,
    sink: *const AbiSink,
) -> u32 {
    // SAFETY: forwarded.
    unsafe {
        acl_call::<T>(instance_ptr, input, sink, |admin, input| {
            let filters = codec::decode_filters(input).map_err(|e| e.to_string())?;
            let [filter] = filters.as_slice() else {
                return Err("describe_acls takes exactly one filter".to_owned());
            };
            Ok(codec::encode_bindings(&admin.describe_acls(filter)))
        })
    }
}
