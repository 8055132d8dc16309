//! Turning the host's C views of a request back into the API's borrowed types without
//! allocating on every call: the principal's strings (and a bearer token's group principals and
//! scopes) are kept per thread and reused, the actions borrow the host's names and sit on the
//! stack (the authorizer runs on the request path; see docs/benchmarks.md).

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::IpAddr;

use super::super::layout::{
    AbiAction, AbiBytes, AbiPrincipal, AbiRequestContext, ACTION_LOG_IF_ALLOWED,
    ACTION_LOG_IF_DENIED, REQUEST_CONTEXT_SIZE, REQUEST_CONTEXT_SIZE_V1,
};
use crate::acl::{AclOperation, PatternType, ResourceType};
use crate::authorizer::{Action, ActionResource, RequestContext};
use crate::principal::Principal;
use smallvec::SmallVec;

/// Buffers reused across calls on one thread.
#[derive(Default)]
struct Scratch {
    principal: Option<Principal>,
    /// The group principals of the latest request (only the first ones may be in use).
    groups: Vec<Principal>,
    /// The scopes of the latest request (idem).
    scopes: Vec<String>,
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
    set(&mut principal.kind, kind);
    set(&mut principal.name, name);
    principal
}

/// `text` holding `value`, reusing its allocation.
#[inline]
fn set(text: &mut String, value: &str) {
    if text != value {
        text.clear();
        text.push_str(value);
    }
}

/// A context the host lends, read as far as the host wrote it: the fields after `client_id`
/// only when its `size` says they are there, else they read as empty (`None` for a null
/// pointer).
///
/// # Safety
///
/// `context` is null or points to an [`AbiRequestContext`] the host lends for the call, at
/// least [`REQUEST_CONTEXT_SIZE_V1`] bytes long, and as long as its `size` says when that is
/// [`REQUEST_CONTEXT_SIZE`] or more.
pub(crate) unsafe fn read_context(context: *const AbiRequestContext) -> Option<AbiRequestContext> {
    if context.is_null() {
        return None;
    }
    // SAFETY: non-null, and `size` lies within the first REQUEST_CONTEXT_SIZE_V1 bytes, which
    // every host lends.
    let size = unsafe { std::ptr::addr_of!((*context).size).read_unaligned() };
    let len = if size >= REQUEST_CONTEXT_SIZE {
        REQUEST_CONTEXT_SIZE
    } else {
        REQUEST_CONTEXT_SIZE_V1
    };
    let mut copy = AbiRequestContext::EMPTY;
    // SAFETY: the host lends at least `len` readable bytes (caller), our copy has
    // REQUEST_CONTEXT_SIZE ≥ `len`; every bit pattern of the copied prefix is valid (integers and
    // raw pointers), and the rest keeps the empty values above.
    unsafe {
        std::ptr::copy_nonoverlapping(
            context.cast::<u8>(),
            (&mut copy as *mut AbiRequestContext).cast::<u8>(),
            len as usize,
        );
    }
    Some(copy)
}

/// An array the host lends for the call (`None` for a null or misaligned pointer with a
/// non-zero length, or a length no allocation can have).
///
/// # Safety
///
/// Unless `ptr` is null or `len` 0, `ptr` points to `len` initialised elements that stay valid
/// and unchanged for `'a`.
#[inline]
unsafe fn host_array<'a, T>(ptr: *const T, len: usize) -> Option<&'a [T]> {
    if len == 0 {
        return Some(&[]);
    }
    if ptr.is_null()
        || !ptr.is_aligned()
        || len > (isize::MAX as usize) / std::mem::size_of::<T>().max(1)
    {
        return None;
    }
    // SAFETY: non-null, aligned, within isize::MAX bytes, and (caller) valid for 'a.
    Some(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// `buffer`'s first `groups.len()` entries holding the host's group principals, reusing the
/// strings of earlier calls (`None` for a malformed buffer).
///
/// # Safety
///
/// Every byte view in `groups` is borrowed from the host for the call, and UTF-8.
unsafe fn fill_groups<'b>(
    buffer: &'b mut Vec<Principal>,
    groups: &[AbiPrincipal],
) -> Option<&'b [Principal]> {
    for (i, group) in groups.iter().enumerate() {
        // SAFETY: forwarded from the caller.
        let (kind, name) = unsafe { (host_str(group.kind)?, host_str(group.name)?) };
        match buffer.get_mut(i) {
            Some(slot) => {
                set(&mut slot.kind, kind);
                set(&mut slot.name, name);
            }
            None => buffer.push(Principal {
                kind: kind.to_owned(),
                name: name.to_owned(),
            }),
        }
    }
    buffer.get(..groups.len())
}

/// `buffer`'s first `scopes.len()` entries holding the host's scopes, reusing their strings.
///
/// # Safety
///
/// As for [`fill_groups`].
unsafe fn fill_scopes<'b>(
    buffer: &'b mut Vec<String>,
    scopes: &[AbiBytes],
) -> Option<&'b [String]> {
    for (i, scope) in scopes.iter().enumerate() {
        // SAFETY: forwarded from the caller.
        let scope = unsafe { host_str(*scope) }?;
        match buffer.get_mut(i) {
            Some(slot) => set(slot, scope),
            None => buffer.push(scope.to_owned()),
        }
    }
    buffer.get(..scopes.len())
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
/// `context` (as [`read_context`] returns it) and every byte view and array in it and in
/// `actions` are borrowed from the host for the duration of the call, and UTF-8.
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
    let jti = match context.has_jti {
        0 => None,
        // SAFETY: forwarded from the caller.
        _ => Some(unsafe { host_str(context.jti) }?),
    };
    // SAFETY: forwarded from the caller (null and 0 from a host without them).
    let (groups, scopes) = unsafe {
        (
            host_array(context.groups, context.group_count)?,
            host_array(context.scopes, context.scope_count)?,
        )
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
        let Scratch {
            principal,
            groups: group_buffer,
            scopes: scope_buffer,
        } = scratch;
        let principal = fill(principal, kind, name);
        // SAFETY: forwarded from the caller.
        let (groups, scopes) = unsafe {
            (
                fill_groups(group_buffer, groups)?,
                fill_scopes(scope_buffer, scopes)?,
            )
        };
        let request = RequestContext::new(
            principal,
            IpAddr::from(context.address),
            listener,
            context.api_key,
            context.api_version,
            context.correlation_id,
        )
        .with_client_id(client_id)
        .with_groups(groups)
        .with_scopes(scopes)
        .with_jti(jti);
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
