//! Turning the host's C views of a request back into the API's borrowed types without
//! allocating on every call: the principal's strings are kept per thread and reused, the
//! actions borrow the host's names and sit on the stack (the authorizer runs on the request
//! path; see docs/benchmarks.md).

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::IpAddr;

use super::super::layout::{
    AbiAction, AbiBytes, AbiRequestContext, ACTION_LOG_IF_ALLOWED, ACTION_LOG_IF_DENIED,
};
use crate::acl::{AclOperation, PatternType, ResourceType};
use crate::authorizer::{Action, ActionResource, RequestContext};
use crate::principal::Principal;
use smallvec::SmallVec;

/// Buffers reused across calls on one thread.
#[derive(Default)]
struct Scratch {
    principal: Option<Principal>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with the thread's buffers; a nested call on the same thread (an authorizer that
/// calls back into the host, which calls a plugin again) gets fresh ones.
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => f(&mut scratch),
        Err(_) => f(&mut Scratch::default()),
    })
}

/// `principal` holding `kind:name`, reusing its strings.
#[inline]
fn fill<'p>(principal: &'p mut Option<Principal>, kind: &str, name: &str) -> &'p Principal {
    let principal = principal.get_or_insert_with(|| Principal {
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

/// Text the host lends for the call.
///
/// # Safety
///
/// The bytes are valid for `'a` (see [`AbiBytes::as_slice`]) and UTF-8.
#[inline]
unsafe fn host_str<'a>(bytes: AbiBytes) -> Option<&'a str> {
    // SAFETY: forwarded from the caller.
    let slice = unsafe { bytes.as_slice() }?;
    debug_assert!(
        std::str::from_utf8(slice).is_ok(),
        "the host lent non-UTF-8 text"
    );
    // SAFETY: the ABI says every text the host lends is UTF-8 (it lends the bytes of `&str`s),
    // and the host is trusted like any code of the process it runs the plugin in. Checking it
    // again on every request would cost a third of the crossing (docs/benchmarks.md).
    Some(unsafe { std::str::from_utf8_unchecked(slice) })
}

/// Calls `f` with `kind:name` as a principal (`None` for a malformed buffer).
///
/// # Safety
///
/// The byte views are borrowed from the host for the duration of the call, and UTF-8.
pub(crate) unsafe fn with_principal<R>(
    kind: AbiBytes,
    name: AbiBytes,
    f: impl FnOnce(&Principal) -> R,
) -> Option<R> {
    // SAFETY: forwarded from the caller.
    let (kind, name) = unsafe { (host_str(kind)?, host_str(name)?) };
    Some(with_scratch(|scratch| {
        f(fill(&mut scratch.principal, kind, name))
    }))
}

/// Calls `f` with the request context and the actions the host passed (`None` for a malformed
/// buffer).
///
/// # Safety
///
/// `context` and every byte view in it and in `actions` are borrowed from the host for the
/// duration of the call, and UTF-8.
pub(crate) unsafe fn with_request<R>(
    context: &AbiRequestContext,
    actions: &[AbiAction],
    f: impl FnOnce(&RequestContext<'_>, &[Action<'_>]) -> R,
) -> Option<R> {
    // SAFETY: forwarded from the caller.
    let (kind, name, listener) = unsafe {
        (
            host_str(context.principal_type)?,
            host_str(context.principal_name)?,
            host_str(context.listener)?,
        )
    };
    let client_id = match context.has_client_id {
        0 => None,
        // SAFETY: forwarded from the caller.
        _ => Some(unsafe { host_str(context.client_id) }?),
    };
    // One action (a produce to one topic, the common case) needs no buffer at all.
    let single;
    let mut several: SmallVec<[Action<'_>; 8]> = SmallVec::new();
    let converted: &[Action<'_>] = match actions {
        [only] => {
            // SAFETY: forwarded from the caller.
            single = unsafe { action_of(only) }?;
            std::slice::from_ref(&single)
        }
        _ => {
            for action in actions {
                // SAFETY: forwarded from the caller.
                several.push(unsafe { action_of(action) }?);
            }
            &several
        }
    };
    with_scratch(|scratch| {
        let principal = fill(&mut scratch.principal, kind, name);
        let request = RequestContext::new(
            principal,
            IpAddr::from(context.address),
            listener,
            context.api_key,
            context.api_version,
            context.correlation_id,
        )
        .with_client_id(client_id);
        Some(f(&request, converted))
    })
}

/// One action (`None` for a malformed name buffer).
///
/// # Safety
///
/// The name is borrowed from the host for `'a`, and UTF-8.
#[inline]
pub(crate) unsafe fn action_of<'a>(action: &AbiAction) -> Option<Action<'a>> {
    let code = |value: i32| i8::try_from(value).unwrap_or(0);
    // SAFETY: forwarded from the caller.
    let name = unsafe { host_str(action.name) }?;
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
