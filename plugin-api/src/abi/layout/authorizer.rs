//! The C layout of authorizer plugins: the request context, actions, authorization results and
//! the authorizer's function table.

use std::ffi::c_void;
use std::mem::size_of;

use super::common::{AbiAddress, AbiBytes, AbiSink, ADDRESS_FAMILY_V4};
#[cfg(doc)]
use super::common::{PART_ERROR, PART_VALUE, STATUS_OK};
use super::declaration::CreateFn;
#[cfg(doc)]
use super::declaration::PluginKind;

/// [`crate::authorizer::RequestContext`] in C layout, borrowed for one call.
///
/// Grown by appending, within ABI 2: the fields after `client_id` (the bearer token's groups,
/// scopes and id) were added later, and `size` says whether the host wrote them. A host from
/// before them writes 0 there (the field was a reserved zero) and lends a context that ends at
/// `client_id` ([`REQUEST_CONTEXT_SIZE_V1`] bytes), so a plugin reads a trailing field only when
/// `size` covers it; a plugin from before them never looks past `client_id`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiRequestContext {
    /// The principal type (UTF-8).
    pub principal_type: AbiBytes,
    /// The principal name (UTF-8).
    pub principal_name: AbiBytes,
    /// The client's address.
    pub address: AbiAddress,
    /// The listener's name (UTF-8).
    pub listener: AbiBytes,
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id.
    pub correlation_id: i32,
    /// 1 when `client_id` is set.
    pub has_client_id: u32,
    /// `size_of::<AbiRequestContext>()` in the host's copy of the API ([`REQUEST_CONTEXT_SIZE`]);
    /// 0 from a host whose context ends at `client_id`.
    pub size: u32,
    /// The client id (UTF-8).
    pub client_id: AbiBytes,
    /// The session's group principals: an array of `group_count` (null when 0).
    pub groups: *const AbiPrincipal,
    /// How many entries `groups` has.
    pub group_count: usize,
    /// The bearer token's scopes (UTF-8 each): an array of `scope_count` (null when 0).
    pub scopes: *const AbiBytes,
    /// How many entries `scopes` has.
    pub scope_count: usize,
    /// 1 when `jti` is set.
    pub has_jti: u32,
    /// Zero.
    pub reserved: u32,
    /// The bearer token's id, its `jti` claim (UTF-8).
    pub jti: AbiBytes,
}

impl AbiRequestContext {
    /// A context that names nothing: empty strings, address `0.0.0.0`, no client id, no token
    /// fields, `size` [`REQUEST_CONTEXT_SIZE`].
    pub const EMPTY: AbiRequestContext = AbiRequestContext {
        principal_type: AbiBytes::EMPTY,
        principal_name: AbiBytes::EMPTY,
        address: AbiAddress {
            family: ADDRESS_FAMILY_V4,
            bytes: [0; 16],
        },
        listener: AbiBytes::EMPTY,
        api_key: 0,
        api_version: 0,
        correlation_id: 0,
        has_client_id: 0,
        size: REQUEST_CONTEXT_SIZE,
        client_id: AbiBytes::EMPTY,
        groups: std::ptr::null(),
        group_count: 0,
        scopes: std::ptr::null(),
        scope_count: 0,
        has_jti: 0,
        reserved: 0,
        jti: AbiBytes::EMPTY,
    };
}

/// `size_of::<AbiRequestContext>()` in this copy of the API, as the host writes it into
/// [`AbiRequestContext::size`].
pub const REQUEST_CONTEXT_SIZE: u32 = size_of::<AbiRequestContext>() as u32;

/// The size of an [`AbiRequestContext`] that ends at `client_id`: what a host from before the
/// token fields lends (and marks with `size` 0).
pub const REQUEST_CONTEXT_SIZE_V1: u32 =
    (std::mem::offset_of!(AbiRequestContext, client_id) + size_of::<AbiBytes>()) as u32;

/// A principal in C layout (`type:name`), borrowed for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiPrincipal {
    /// The principal type (UTF-8).
    pub kind: AbiBytes,
    /// The principal name (UTF-8).
    pub name: AbiBytes,
}

/// [`crate::authorizer::Action::log_if_allowed`].
pub const ACTION_LOG_IF_ALLOWED: u32 = 1;
/// [`crate::authorizer::Action::log_if_denied`].
pub const ACTION_LOG_IF_DENIED: u32 = 2;

/// [`crate::authorizer::Action`] in C layout, borrowed for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiAction {
    /// The operation's Kafka code (`AclOperation::code`).
    pub operation: i32,
    /// The resource type's Kafka code.
    pub resource_type: i32,
    /// The pattern type's Kafka code (LITERAL for every action the host builds).
    pub pattern_type: i32,
    /// How many times the request references the resource.
    pub reference_count: u32,
    /// `ACTION_LOG_*` bits.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
    /// The resource name (UTF-8).
    pub name: AbiBytes,
}

impl AbiAction {
    /// An action that names nothing (an unused slot).
    pub const EMPTY: AbiAction = AbiAction {
        operation: 0,
        resource_type: 0,
        pattern_type: 0,
        reference_count: 0,
        flags: 0,
        reserved: 0,
        name: AbiBytes::EMPTY,
    };
}

/// Denied (also what a zeroed answer means: an answer the plugin did not write fails closed).
pub const DECISION_DENIED: u32 = 0;
/// Allowed.
pub const DECISION_ALLOWED: u32 = 1;

/// No matching ALLOW.
pub const RULE_DEFAULT_DENY: u32 = 0;
/// No ACL exists for the resource and everyone is allowed then.
pub const RULE_DEFAULT_ALLOW: u32 = 1;
/// The principal is a super user.
pub const RULE_SUPER_USER: u32 = 2;
/// A rule of the plugin's own (an ACL, a naming convention, ...): the host reports the plugin.
pub const RULE_PLUGIN: u32 = 3;

/// One answer of `authorize`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbiAuthorization {
    /// `DECISION_*`.
    pub decision: u32,
    /// `RULE_*`.
    pub rule: u32,
}

/// Decides `count` actions (an array borrowed for the call) for `context`, writing one answer per
/// action to `out` (an array of `count`, pre-filled with denials by the host). Returns a
/// `STATUS_*`; on anything but [`STATUS_OK`] the host denies every action.
pub type AuthorizeFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiRequestContext,
    actions: *const AbiAction,
    count: usize,
    out: *mut AbiAuthorization,
) -> u32;
/// `authorize_by_resource_type`: returns a `DECISION_*` (a panic is [`DECISION_DENIED`]).
pub type AuthorizeByTypeFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiRequestContext,
    operation: i32,
    resource_type: i32,
) -> u32;
/// Whether the instance stores ACLs (1) and the ACL functions may be called.
pub type HasAclAdminFn = unsafe extern "C" fn(instance: *const c_void) -> u32;
/// An ACL administration call: the input is encoded (`codec`), the result goes to the sink's
/// [`PART_VALUE`] (encoded), an error to [`PART_ERROR`]; returns a `STATUS_*`.
pub type AclCallFn =
    unsafe extern "C" fn(instance: *const c_void, input: AbiBytes, sink: *const AbiSink) -> u32;

/// The functions of a [`PluginKind::Authorizer`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AuthorizerTable {
    /// `size_of::<AuthorizerTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`AuthorizeFn`].
    pub authorize: Option<AuthorizeFn>,
    /// See [`AuthorizeByTypeFn`].
    pub authorize_by_resource_type: Option<AuthorizeByTypeFn>,
    /// See [`HasAclAdminFn`].
    pub has_acl_admin: Option<HasAclAdminFn>,
    /// `create_acls`: input bindings, output one result per binding.
    pub create_acls: Option<AclCallFn>,
    /// `delete_acls`: input filters, output the deleted bindings per filter.
    pub delete_acls: Option<AclCallFn>,
    /// `describe_acls`: input one filter, output the matching bindings.
    pub describe_acls: Option<AclCallFn>,
}
