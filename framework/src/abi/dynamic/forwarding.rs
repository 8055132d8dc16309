//! A dynamic forwarding policy as a [`ForwardingPolicy`]: a failed `route` refuses the request, a
//! failed `admits` refuses the action (fail closed).

use std::sync::Arc;

use super::super::tables::PolicyFunctions;
use super::super::{
    AbiBytes, AbiRequestInfo, AbiRoute, ROUTE_CONTROLLER, ROUTE_LOCAL, ROUTE_REJECT,
    ROUTE_UPSTREAM, ROUTE_UPSTREAM_DELEGATED, STATUS_OK,
};
use super::{abi_action, owned_name, request_context, ContextViews, CreateError, Instance};
use crate::authorizer::{Action, RequestContext};
use crate::errors::ErrorCode;
use crate::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};

/// A forwarding policy provided by a dynamic plugin.
pub struct DynamicPolicy {
    plugin: Arc<str>,
    name: String,
    functions: PolicyFunctions,
    instance: Instance,
    /// Asked once, at creation.
    screens_actions: bool,
}

impl std::fmt::Debug for DynamicPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicPolicy")
            .field("plugin", &self.plugin)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl DynamicPolicy {
    /// Wraps an instance, reading its name and whether it screens actions.
    ///
    /// # Safety
    ///
    /// `functions` come from a validated table of a library that is never unloaded, and
    /// `instance` is what its `create` returned.
    pub(crate) unsafe fn new(
        plugin: Arc<str>,
        functions: PolicyFunctions,
        instance: Instance,
    ) -> Result<Self, CreateError> {
        // SAFETY: forwarded from the caller.
        let name = unsafe { owned_name(functions.name, instance, "policy name") }?;
        // SAFETY: forwarded from the caller.
        let screens_actions = unsafe { (functions.screens_actions)(instance.as_ptr()) } == 1;
        Ok(Self {
            plugin,
            name,
            functions,
            instance,
            screens_actions,
        })
    }
}

impl ForwardingPolicy for DynamicPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn route(&self, request: &RequestInfo<'_>) -> Route {
        let info = AbiRequestInfo {
            api_key: request.api_key,
            api_version: request.api_version,
            reserved: 0,
            principal_type: AbiBytes::from_text(&request.principal.kind),
            principal_name: AbiBytes::from_text(&request.principal.name),
        };
        let mut route = AbiRoute::default();
        // SAFETY: a validated function, our instance, and a request and result slot that
        // outlive the call.
        let status = unsafe { (self.functions.route)(self.instance.as_ptr(), &info, &mut route) };
        let refused = Route::Reject(ErrorCode::POLICY_VIOLATION);
        if status != STATUS_OK {
            tracing::warn!(plugin = %self.plugin, status, api_key = request.api_key, "forwarding policy plugin failed; the request is refused");
            return refused;
        }
        match route.kind {
            ROUTE_LOCAL => Route::Local,
            ROUTE_UPSTREAM => Route::Upstream {
                identity: UpstreamIdentity::Service,
            },
            ROUTE_UPSTREAM_DELEGATED => Route::Upstream {
                identity: UpstreamIdentity::Delegated,
            },
            ROUTE_CONTROLLER => Route::Controller,
            ROUTE_REJECT => Route::Reject(ErrorCode(
                i16::try_from(route.error_code).unwrap_or(ErrorCode::POLICY_VIOLATION.0),
            )),
            _ => refused,
        }
    }

    fn screens_actions(&self) -> bool {
        self.screens_actions
    }

    fn admits(&self, context: &RequestContext<'_>, action: &Action<'_>) -> bool {
        let views = ContextViews::of(context);
        let abi_context = request_context(context, &views);
        let abi_action = abi_action(action);
        // SAFETY: a validated function, our instance, and a context (with its views) and action
        // that outlive the call.
        unsafe { (self.functions.admits)(self.instance.as_ptr(), &abi_context, &abi_action) == 1 }
    }
}
