//! The C layout of forwarding policy plugins: the request info, the route codes and result, and
//! the policy's function table.

use std::ffi::c_void;

use super::authorizer::{AbiAction, AbiRequestContext};
use super::common::AbiBytes;
#[cfg(doc)]
use super::declaration::PluginKind;
use super::declaration::{CreateFn, NameFn};

/// [`crate::forwarding::RequestInfo`] in C layout, borrowed for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiRequestInfo {
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// Zero.
    pub reserved: u32,
    /// The principal type (UTF-8).
    pub principal_type: AbiBytes,
    /// The principal name (UTF-8).
    pub principal_name: AbiBytes,
}

/// No route written: the host refuses the request.
pub const ROUTE_UNSET: u32 = 0;
/// [`crate::forwarding::Route::Local`].
pub const ROUTE_LOCAL: u32 = 1;
/// [`crate::forwarding::Route::Upstream`] with the service identity.
pub const ROUTE_UPSTREAM: u32 = 2;
/// [`crate::forwarding::Route::Controller`].
pub const ROUTE_CONTROLLER: u32 = 3;
/// [`crate::forwarding::Route::Reject`] with `error_code`.
pub const ROUTE_REJECT: u32 = 4;
/// [`crate::forwarding::Route::Upstream`] with the client's own identity
/// ([`crate::forwarding::UpstreamIdentity::Delegated`]). Added within ABI 2: a host that predates
/// it does not know the value and refuses the request (fails closed); a host that has it refuses
/// it too unless `[forwarding.delegated]` is configured.
pub const ROUTE_UPSTREAM_DELEGATED: u32 = 5;

/// A route in C layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbiRoute {
    /// `ROUTE_*`.
    pub kind: u32,
    /// The Kafka error code of a rejection.
    pub error_code: i32,
}

/// Routes a request: writes `out`, returns a `STATUS_*` (anything else refuses the request).
pub type RouteFn = unsafe extern "C" fn(
    instance: *const c_void,
    request: *const AbiRequestInfo,
    out: *mut AbiRoute,
) -> u32;
/// Whether the policy screens actions (1) or not (0).
pub type ScreensActionsFn = unsafe extern "C" fn(instance: *const c_void) -> u32;
/// Whether one action may go ahead (1) or is refused (anything else, a panic included).
pub type AdmitsFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiRequestContext,
    action: *const AbiAction,
) -> u32;

/// The functions of a [`PluginKind::ForwardingPolicy`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ForwardingPolicyTable {
    /// `size_of::<ForwardingPolicyTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// The policy's name; see [`NameFn`].
    pub name: Option<NameFn>,
    /// See [`RouteFn`].
    pub route: Option<RouteFn>,
    /// See [`ScreensActionsFn`].
    pub screens_actions: Option<ScreensActionsFn>,
    /// See [`AdmitsFn`].
    pub admits: Option<AdmitsFn>,
}
