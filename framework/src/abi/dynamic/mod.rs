//! The host side's wrappers: a validated export's functions and its plugin's instance presented
//! as the kind's ordinary trait object. Everything the plugin returns is copied into host-owned
//! values before the next call, and checked (UTF-8, null pointers, known codes), so a misbehaving
//! plugin yields a failed call — a denial, a refused request, a failed authentication — never
//! undefined behaviour in the host.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use portcullis_plugin_api::abi::codec;
use portcullis_plugin_api::abi::sink::Parts;

use super::tables::KindTable;
use super::validate::ValidatedExport;
use super::{
    AbiAction, AbiBytes, AbiHostServices, AbiPrincipal, AbiRequestContext, ACTION_LOG_IF_ALLOWED,
    ACTION_LOG_IF_DENIED, REQUEST_CONTEXT_SIZE, STATUS_ERROR, STATUS_OK, STATUS_PANICKED,
};
use crate::authorizer::{Action, RequestContext};
use crate::plugin::PluginError;
use crate::registry::PluginInstance;

mod authorizer;
mod events;
mod forwarding;
mod login;
mod principal;
mod sasl;

pub use authorizer::DynamicAuthorizer;
pub use events::DynamicSubscriber;
pub use forwarding::DynamicPolicy;
pub use login::DynamicLogin;
pub use principal::DynamicPrincipalBuilder;
pub use sasl::DynamicMechanism;

/// Why a plugin's instance could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateError {
    /// The plugin refused: its configuration does not deserialize, a value is unusable, or
    /// something it needs at start-up is missing.
    #[error("{0}")]
    Refused(PluginError),
    /// The plugin panicked while creating its instance.
    #[error("the plugin panicked while creating its instance: {0}")]
    Panicked(String),
    /// The plugin broke the ABI's contract (no instance, an unknown status, an unreadable error).
    #[error("the plugin's create function {0}")]
    Broken(String),
}

/// A plugin's instance pointer, which the plugin never frees (libraries are never unloaded).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Instance(NonNull<c_void>);

// SAFETY: the instance is a `T: Plugin` (which is `Send + Sync`) behind the export macro's
// functions, which only take shared references to it.
unsafe impl Send for Instance {}
// SAFETY: as for `Send`.
unsafe impl Sync for Instance {}

impl Instance {
    pub(crate) fn as_ptr(self) -> *const c_void {
        self.0.as_ptr().cast_const()
    }
}

impl ValidatedExport {
    /// Creates the plugin's instance from the TOML text of its configuration table (possibly
    /// empty) with `services` (see [`super::export_services`]), and wraps it as the kind's trait
    /// object. This is the first call into the plugin's code.
    ///
    /// # Errors
    /// [`CreateError`]: the plugin refused (with its typed error), panicked, or broke the ABI.
    pub fn create(
        &self,
        config: &str,
        services: &'static AbiHostServices,
    ) -> Result<PluginInstance, CreateError> {
        let mut parts = Parts::new();
        let sink = parts.sink();
        let mut instance: *const c_void = std::ptr::null();
        // SAFETY: `create` came from a validated table; the config bytes, the instance slot and
        // the sink are ours and outlive the call, and the services table lives forever.
        let status = unsafe {
            (self.table.create())(AbiBytes::from_text(config), services, &mut instance, &sink)
        };
        let instance = match status {
            STATUS_OK => NonNull::new(instance.cast_mut())
                .map(Instance)
                .ok_or_else(|| CreateError::Broken("returned no instance".to_owned()))?,
            STATUS_ERROR => {
                let error = parts.error.as_deref().unwrap_or_default();
                return Err(match codec::decode_plugin_error(error) {
                    Ok(refused) => CreateError::Refused(refused),
                    Err(e) => CreateError::Broken(format!("returned an unreadable error: {e}")),
                });
            }
            STATUS_PANICKED => return Err(CreateError::Panicked(parts.error_text("(no message)"))),
            other => return Err(CreateError::Broken(format!("returned status {other}"))),
        };
        let plugin: Arc<str> = Arc::from(self.name());
        let created = match self.table {
            KindTable::SaslMechanism(_, f) => {
                // SAFETY: validated functions of a library that is never unloaded, and the
                // instance their `create` returned (the same for every arm below).
                let wrapped = unsafe { DynamicMechanism::new(plugin, f, instance) }?;
                PluginInstance::SaslMechanism(Arc::new(wrapped))
            }
            KindTable::Authorizer(_, f) => {
                // SAFETY: as above.
                let wrapped = unsafe { DynamicAuthorizer::new(plugin, f, instance) };
                PluginInstance::Authorizer(Arc::new(wrapped))
            }
            KindTable::PrincipalBuilder(_, f) => {
                // SAFETY: as above.
                let wrapped = unsafe { DynamicPrincipalBuilder::new(plugin, f, instance) };
                PluginInstance::PrincipalBuilder(Arc::new(wrapped))
            }
            KindTable::LoginModule(_, f) => {
                // SAFETY: as above.
                let wrapped = unsafe { DynamicLogin::new(plugin, f, instance) }?;
                PluginInstance::LoginModule(Arc::new(wrapped))
            }
            KindTable::ForwardingPolicy(_, f) => {
                // SAFETY: as above.
                let wrapped = unsafe { DynamicPolicy::new(plugin, f, instance) }?;
                PluginInstance::ForwardingPolicy(Arc::new(wrapped))
            }
            KindTable::EventSubscriber(_, f) => {
                // SAFETY: as above.
                let wrapped = unsafe { DynamicSubscriber::new(plugin, f, instance) };
                PluginInstance::EventSubscriber(Arc::new(wrapped))
            }
        };
        Ok(created)
    }
}

/// Reads a name the plugin owns forever (a mechanism's, a policy's).
///
/// # Safety
///
/// `name` is a validated `NameFn` and `instance` its plugin's.
pub(crate) unsafe fn owned_name(
    name: super::NameFn,
    instance: Instance,
    what: &str,
) -> Result<String, CreateError> {
    // SAFETY: forwarded from the caller.
    let bytes = unsafe { name(instance.as_ptr()) };
    // SAFETY: the name is owned by the instance, which is never freed or mutated.
    unsafe { bytes.as_str() }
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| CreateError::Broken(format!("gave an empty or non-UTF-8 {what}")))
}

/// How many groups and scopes of a context cross the ABI in arrays on the stack; more take one
/// allocation per call.
const INLINE_VIEWS: usize = 4;

/// The C views of a context's groups and scopes, which its [`request_context`] points into: keep
/// it alive (and in place) until the call that gets that context returns.
pub(crate) struct ContextViews {
    groups: smallvec::SmallVec<[AbiPrincipal; INLINE_VIEWS]>,
    scopes: smallvec::SmallVec<[AbiBytes; INLINE_VIEWS]>,
}

impl ContextViews {
    /// The views of `context`'s groups and scopes, borrowing them.
    #[inline]
    pub(crate) fn of(context: &RequestContext<'_>) -> Self {
        Self {
            groups: context
                .groups
                .iter()
                .map(|group| AbiPrincipal {
                    kind: AbiBytes::from_text(&group.kind),
                    name: AbiBytes::from_text(&group.name),
                })
                .collect(),
            scopes: context
                .scopes
                .iter()
                .map(|scope| AbiBytes::from_text(scope))
                .collect(),
        }
    }
}

/// A request context in C layout, borrowing `context` and `views` (its groups and scopes,
/// [`ContextViews::of`] the same context).
#[inline]
pub(crate) fn request_context(
    context: &RequestContext<'_>,
    views: &ContextViews,
) -> AbiRequestContext {
    AbiRequestContext {
        principal_type: AbiBytes::from_text(&context.principal.kind),
        principal_name: AbiBytes::from_text(&context.principal.name),
        address: context.client_address.into(),
        listener: AbiBytes::from_text(&context.listener),
        api_key: context.api_key,
        api_version: context.api_version,
        correlation_id: context.correlation_id,
        has_client_id: u32::from(context.client_id.is_some()),
        size: REQUEST_CONTEXT_SIZE,
        client_id: context
            .client_id
            .as_deref()
            .map_or(AbiBytes::EMPTY, AbiBytes::from_text),
        groups: array(&views.groups),
        group_count: views.groups.len(),
        scopes: array(&views.scopes),
        scope_count: views.scopes.len(),
        has_jti: u32::from(context.jti.is_some()),
        reserved: 0,
        jti: context
            .jti
            .as_deref()
            .map_or(AbiBytes::EMPTY, AbiBytes::from_text),
    }
}

/// An array's pointer, null when it is empty (as the ABI says).
#[inline]
fn array<T>(items: &[T]) -> *const T {
    if items.is_empty() {
        std::ptr::null()
    } else {
        items.as_ptr()
    }
}

/// An action in C layout, borrowing `action`.
#[inline]
pub(crate) fn abi_action(action: &Action<'_>) -> AbiAction {
    let mut flags = 0;
    if action.log_if_allowed {
        flags |= ACTION_LOG_IF_ALLOWED;
    }
    if action.log_if_denied {
        flags |= ACTION_LOG_IF_DENIED;
    }
    AbiAction {
        operation: i32::from(action.operation.code()),
        resource_type: i32::from(action.resource.resource_type.code()),
        pattern_type: i32::from(action.resource.pattern_type.code()),
        reference_count: action.resource_reference_count,
        flags,
        reserved: 0,
        name: AbiBytes::from_text(&action.resource.name),
    }
}
