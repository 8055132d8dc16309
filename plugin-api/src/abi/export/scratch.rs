//! Turning the host's C views of a request back into the API's borrowed types without
//! allocating on every call: the principal's strings and the actions' vector are kept per
//! thread and reused (the authorizer runs on the request path; see docs/benchmarks.md).

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::IpAddr;

use super::super::layout::{
    AbiAction, AbiRequestContext, ACTION_LOG_IF_ALLOWED, ACTION_LOG_IF_DENIED,
};
use crate::acl::{AclOperation, PatternType, ResourceType};
use crate::authorizer::{Action, ActionResource, RequestContext};
use crate::principal::Principal;

/// Buffers reused across calls on one thread.
#[derive(Default)]
struct Scratch {
    principal: Option<Principal>,
    /// Always empty between calls; only its allocation is kept.
    actions: Vec<Action<'static>>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Takes the thread's buffers (a nested call on the same thread gets fresh ones).
fn take() -> Scratch {
    SCRATCH.with(|cell| {
        cell.try_borrow_mut()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    })
}

/// Gives the buffers back for the next call.
fn give_back(scratch: Scratch) {
    SCRATCH.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            *slot = scratch;
        }
    });
}

/// An empty vector of any lifetime, keeping `actions`' allocation: an in-place collect of an
/// empty vector into an element type of the same layout reuses the buffer (no `unsafe`).
fn relabel<'a, 'b>(mut actions: Vec<Action<'a>>) -> Vec<Action<'b>> {
    actions.clear();
    #[allow(
        clippy::unnecessary_filter_map,
        reason = "the element type changes (the lifetime), which `filter` cannot do"
    )]
    let relabelled = actions
        .into_iter()
        .filter_map(|_| None::<Action<'b>>)
        .collect();
    relabelled
}

/// `principal` holding `kind:name`, reusing its strings.
fn fill(principal: Option<Principal>, kind: &str, name: &str) -> Principal {
    let mut principal = principal.unwrap_or(Principal {
        kind: String::new(),
        name: String::new(),
    });
    if principal.kind != kind {
        principal.kind.clear();
        principal.kind.push_str(kind);
    }
    if principal.name != name {
        principal.name.clear();
        principal.name.push_str(name);
    }
    principal
}

/// Calls `f` with `kind:name` as a principal (`None` if either is not UTF-8).
///
/// # Safety
///
/// The byte views are borrowed from the host for the duration of the call.
pub(crate) unsafe fn with_principal<R>(
    kind: super::super::layout::AbiBytes,
    name: super::super::layout::AbiBytes,
    f: impl FnOnce(&Principal) -> R,
) -> Option<R> {
    // SAFETY: forwarded from the caller.
    let (kind, name) = unsafe { (kind.as_str()?, name.as_str()?) };
    let mut scratch = take();
    let principal = fill(scratch.principal.take(), kind, name);
    let result = f(&principal);
    scratch.principal = Some(principal);
    give_back(scratch);
    Some(result)
}

/// Calls `f` with the request context and the actions the host passed (`None` if a string is not
/// UTF-8).
///
/// # Safety
///
/// `context` and every byte view in it and in `actions` are borrowed from the host for the
/// duration of the call.
pub(crate) unsafe fn with_request<R>(
    context: &AbiRequestContext,
    actions: &[AbiAction],
    f: impl FnOnce(&RequestContext<'_>, &[Action<'_>]) -> R,
) -> Option<R> {
    // SAFETY: forwarded from the caller.
    let (kind, name, listener) = unsafe {
        (
            context.principal_type.as_str()?,
            context.principal_name.as_str()?,
            context.listener.as_str()?,
        )
    };
    let client_id = match context.has_client_id {
        0 => None,
        // SAFETY: forwarded from the caller.
        _ => Some(unsafe { context.client_id.as_str() }?),
    };
    let mut scratch = take();
    let principal = fill(scratch.principal.take(), kind, name);
    let mut converted = relabel(std::mem::take(&mut scratch.actions));
    for action in actions {
        // SAFETY: forwarded from the caller.
        converted.push(unsafe { action_of(action) }?);
    }
    let request = RequestContext::new(
        &principal,
        IpAddr::from(context.address),
        listener,
        context.api_key,
        context.api_version,
        context.correlation_id,
    )
    .with_client_id(client_id);
    let result = f(&request, &converted);
    drop(request);
    scratch.actions = relabel(converted);
    scratch.principal = Some(principal);
    give_back(scratch);
    Some(result)
}

/// One action (`None` if its name is not UTF-8).
///
/// # Safety
///
/// The name is borrowed from the host for `'a`.
pub(crate) unsafe fn action_of<'a>(action: &AbiAction) -> Option<Action<'a>> {
    let code = |value: i32| i8::try_from(value).unwrap_or(0);
    // SAFETY: forwarded from the caller.
    let name = unsafe { action.name.as_str() }?;
    Some(Action {
        operation: AclOperation::from_code(code(action.operation)),
        resource: ActionResource {
            resource_type: ResourceType::from_code(code(action.resource_type)),
            name: Cow::Borrowed(name),
            pattern_type: PatternType::from_code(code(action.pattern_type)),
        },
        resource_reference_count: action.reference_count,
        log_if_allowed: action.flags & ACTION_LOG_IF_ALLOWED != 0,
        log_if_denied: action.flags & ACTION_LOG_IF_DENIED != 0,
    })
}
