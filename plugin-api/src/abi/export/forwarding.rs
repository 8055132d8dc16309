//! Forwarding policies: a panic in `route` refuses the request, a panic in `admits` refuses the
//! action (fail closed).

use std::ffi::c_void;

use super::super::layout::{
    AbiAction, AbiBytes, AbiHostServices, AbiRequestContext, AbiRequestInfo, AbiRoute, AbiSink,
    ForwardingPolicyTable, PluginExport, PluginKind, ROUTE_CONTROLLER, ROUTE_LOCAL, ROUTE_REJECT,
    ROUTE_UNSET, ROUTE_UPSTREAM, ROUTE_UPSTREAM_DELEGATED, STATUS_ERROR, STATUS_OK,
    STATUS_PANICKED,
};
use super::scratch::{read_context, with_principal, with_request};
use super::{contain, export, instance};
use crate::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};
use crate::host::Host;
use crate::plugin::Plugin;

/// What `create` leaks: the policy, its name and whether it screens actions (asked once).
struct Instance<T> {
    policy: T,
    name: String,
}

/// Plugin `T`'s export entry.
pub const fn entry<T: Plugin + ForwardingPolicy>() -> PluginExport {
    export::<T>(
        PluginKind::ForwardingPolicy,
        (Tables::<T>::TABLE as *const ForwardingPolicyTable).cast::<c_void>(),
    )
}

struct Tables<T>(std::marker::PhantomData<T>);

impl<T: Plugin + ForwardingPolicy> Tables<T> {
    const TABLE: &'static ForwardingPolicyTable = &ForwardingPolicyTable {
        table_size: super::super::layout::table_size(PluginKind::ForwardingPolicy),
        create: Some(create::<T>),
        name: Some(name::<T>),
        route: Some(route::<T>),
        screens_actions: Some(screens_actions::<T>),
        admits: Some(admits::<T>),
    };
}

unsafe extern "C" fn create<T: Plugin + ForwardingPolicy>(
    config: AbiBytes,
    services: *const AbiHostServices,
    out: *mut *const c_void,
    error: *const AbiSink,
) -> u32 {
    // SAFETY: the ABI's `create` arguments, forwarded.
    unsafe {
        super::create::<T, Instance<T>>(config, services, out, error, |policy, _host: Host| {
            let name = policy.name().to_owned();
            Instance { policy, name }
        })
    }
}

unsafe extern "C" fn name<T: Plugin + ForwardingPolicy>(instance_ptr: *const c_void) -> AbiBytes {
    contain(
        // SAFETY: what `create::<T>` returned, or null.
        || match unsafe { instance::<Instance<T>>(instance_ptr) } {
            Some(instance) => AbiBytes::from_text(&instance.name),
            None => AbiBytes::EMPTY,
        },
        |_| AbiBytes::EMPTY,
    )
}

fn abi_route(route: &Route) -> AbiRoute {
    match route {
        Route::Local => AbiRoute {
            kind: ROUTE_LOCAL,
            error_code: 0,
        },
        Route::Upstream {
            identity: UpstreamIdentity::Service,
        } => AbiRoute {
            kind: ROUTE_UPSTREAM,
            error_code: 0,
        },
        Route::Upstream {
            identity: UpstreamIdentity::Delegated,
        } => AbiRoute {
            kind: ROUTE_UPSTREAM_DELEGATED,
            error_code: 0,
        },
        Route::Controller => AbiRoute {
            kind: ROUTE_CONTROLLER,
            error_code: 0,
        },
        Route::Reject(code) => AbiRoute {
            kind: ROUTE_REJECT,
            error_code: i32::from(code.0),
        },
        // A route this ABI cannot express is no route: the host refuses the request.
        #[allow(unreachable_patterns)]
        _ => AbiRoute {
            kind: ROUTE_UNSET,
            error_code: 0,
        },
    }
}

unsafe extern "C" fn route<T: Plugin + ForwardingPolicy>(
    instance_ptr: *const c_void,
    request: *const AbiRequestInfo,
    out: *mut AbiRoute,
) -> u32 {
    contain(
        || {
            // SAFETY: what `create::<T>` returned, or null; the request is the host's, or null.
            let (Some(instance), Some(request)) =
                (unsafe { instance::<Instance<T>>(instance_ptr) }, unsafe {
                    request.as_ref()
                })
            else {
                return STATUS_ERROR;
            };
            // SAFETY: the principal's bytes are lent by the host for the call.
            let routed = unsafe {
                with_principal(
                    request.principal_type,
                    request.principal_name,
                    |principal| {
                        instance.policy.route(&RequestInfo::new(
                            request.api_key,
                            request.api_version,
                            principal,
                        ))
                    },
                )
            };
            let Some(routed) = routed else {
                return STATUS_ERROR;
            };
            if out.is_null() {
                return STATUS_ERROR;
            }
            // SAFETY: non-null, the host's own result slot.
            unsafe { out.write(abi_route(&routed)) };
            STATUS_OK
        },
        |_| STATUS_PANICKED,
    )
}

unsafe extern "C" fn screens_actions<T: Plugin + ForwardingPolicy>(
    instance_ptr: *const c_void,
) -> u32 {
    contain(
        // SAFETY: what `create::<T>` returned, or null.
        || match unsafe { instance::<Instance<T>>(instance_ptr) } {
            Some(instance) => u32::from(instance.policy.screens_actions()),
            None => 0,
        },
        |_| 0,
    )
}

unsafe extern "C" fn admits<T: Plugin + ForwardingPolicy>(
    instance_ptr: *const c_void,
    context: *const AbiRequestContext,
    action: *const AbiAction,
) -> u32 {
    contain(
        || {
            // SAFETY: what `create::<T>` returned, or null; context and action are the host's
            // for the call, or null.
            let (Some(instance), Some(context), Some(action)) = (
                unsafe { instance::<Instance<T>>(instance_ptr) },
                unsafe { read_context(context) },
                unsafe { action.as_ref() },
            ) else {
                return 0;
            };
            // SAFETY: borrowed from the host for the call.
            let admitted = unsafe {
                with_request(
                    &context,
                    std::slice::from_ref(action),
                    |request, actions| {
                        actions
                            .first()
                            .is_some_and(|action| instance.policy.admits(request, action))
                    },
                )
            };
            u32::from(admitted == Some(true))
        },
        |_| 0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::ErrorCode;

    #[test]
    fn each_route_has_its_own_code_and_the_delegated_identity_is_not_lost() {
        let delegated = Route::Upstream {
            identity: UpstreamIdentity::Delegated,
        };
        assert_eq!(abi_route(&delegated).kind, ROUTE_UPSTREAM_DELEGATED);
        assert_eq!(abi_route(&Route::standard(0)).kind, ROUTE_UPSTREAM);
        assert_eq!(abi_route(&Route::Local).kind, ROUTE_LOCAL);
        assert_eq!(abi_route(&Route::Controller).kind, ROUTE_CONTROLLER);
        let reject = abi_route(&Route::Reject(ErrorCode::POLICY_VIOLATION));
        assert_eq!(
            (reject.kind, reject.error_code),
            (ROUTE_REJECT, i32::from(ErrorCode::POLICY_VIOLATION.0))
        );
    }
}
