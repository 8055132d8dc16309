//! A dynamic authorizer as an [`Authorizer`] (and its ACL administration as an [`AclAdmin`]).
//!
//! On the request path a call costs one crossing for the whole request: the actions go over as
//! one array (on the stack for up to 8), the answers come back in another, and nothing is
//! allocated on either side (docs/benchmarks.md measures the cost against the same authorizer
//! linked in). A plugin that fails — panics, breaks the ABI — denies every action of that call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use portcullis_plugin_api::abi::codec;
use portcullis_plugin_api::abi::sink::Parts;

use super::super::tables::AuthorizerFunctions;
use super::super::{
    AbiAction, AbiAuthorization, AbiBytes, AclCallFn, DECISION_ALLOWED, RULE_DEFAULT_ALLOW,
    RULE_DEFAULT_DENY, RULE_SUPER_USER, STATUS_OK,
};
use super::{abi_action, request_context, ContextViews, Instance};
use crate::acl::{AclBinding, AclBindingFilter, AclOperation, ResourceType};
use crate::authorizer::{
    AclAdmin, AclAdminError, Action, Authorization, Authorizer, DecidingRule, Decision,
    RequestContext,
};

/// An authorizer provided by a dynamic plugin.
pub struct DynamicAuthorizer {
    plugin: Arc<str>,
    functions: AuthorizerFunctions,
    instance: Instance,
    /// Whether the plugin stores ACLs (asked once).
    has_acl_admin: bool,
    /// Calls that failed (a panic, a broken answer): each denied its actions.
    failures: AtomicU64,
}

impl std::fmt::Debug for DynamicAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicAuthorizer")
            .field("plugin", &self.plugin)
            .field("acl_admin", &self.has_acl_admin)
            .finish_non_exhaustive()
    }
}

impl DynamicAuthorizer {
    /// Wraps an instance.
    ///
    /// # Safety
    ///
    /// `functions` come from a validated table of a library that is never unloaded, and
    /// `instance` is what its `create` returned.
    pub(crate) unsafe fn new(
        plugin: Arc<str>,
        functions: AuthorizerFunctions,
        instance: Instance,
    ) -> Self {
        // SAFETY: forwarded from the caller.
        let has_acl_admin = unsafe { (functions.has_acl_admin)(instance.as_ptr()) } == 1;
        Self {
            plugin,
            functions,
            instance,
            has_acl_admin,
            failures: AtomicU64::new(0),
        }
    }

    /// The plugin's name.
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }

    /// How many calls failed and denied every action they carried.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn authorization(&self, answer: &AbiAuthorization) -> Authorization {
        let decision = if answer.decision == DECISION_ALLOWED {
            Decision::Allowed
        } else {
            Decision::Denied
        };
        let rule = match answer.rule {
            RULE_DEFAULT_DENY => DecidingRule::DefaultDeny,
            RULE_DEFAULT_ALLOW => DecidingRule::DefaultAllow,
            RULE_SUPER_USER => DecidingRule::SuperUser,
            _ => DecidingRule::Plugin {
                plugin: Arc::clone(&self.plugin),
            },
        };
        Authorization::new(decision, rule)
    }

    /// One call of the plugin's `authorize` with the actions and answer slots in C layout.
    fn cross(
        &self,
        context: &RequestContext<'_>,
        actions: &[AbiAction],
        answers: &mut [AbiAuthorization],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        let views = ContextViews::of(context);
        let abi_context = request_context(context, &views);
        // SAFETY: a validated function and our instance; the context (and the views it points
        // into), the action array and the answer array (both the same length) are ours and
        // outlive the call.
        let status = unsafe {
            (self.functions.authorize)(
                self.instance.as_ptr(),
                &abi_context,
                actions.as_ptr(),
                actions.len(),
                answers.as_mut_ptr(),
            )
        };
        if status != STATUS_OK {
            self.failed(status);
            for i in 0..actions.len() {
                decided(i, Authorization::denied(DecidingRule::Failed));
            }
            return;
        }
        for (i, answer) in answers.iter().enumerate() {
            decided(i, self.authorization(answer));
        }
    }

    fn failed(&self, status: u32) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            plugin = %self.plugin,
            status,
            failures,
            "authorizer plugin failed; every action of the request is denied"
        );
    }
}

impl Authorizer for DynamicAuthorizer {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        let mut answers = Vec::with_capacity(actions.len());
        self.authorize_each(context, actions, &mut |_, answer| answers.push(answer));
        answers
    }

    fn authorize_each(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        // Up to `INLINE` actions (nearly every request) cross in arrays on the stack, filled in
        // place: no allocation, no copy of a collected buffer.
        const INLINE: usize = 8;
        let slots = actions.len();
        if let [only] = actions {
            // One action (a produce to one topic): no array to initialize at all.
            let action = abi_action(only);
            let mut answer = [AbiAuthorization::default()];
            self.cross(context, std::slice::from_ref(&action), &mut answer, decided);
        } else if slots <= INLINE {
            let mut abi_actions = [AbiAction::EMPTY; INLINE];
            for (slot, action) in abi_actions.iter_mut().zip(actions) {
                *slot = abi_action(action);
            }
            // Pre-filled with denials: an answer the plugin does not write fails closed.
            let mut answers = [AbiAuthorization::default(); INLINE];
            let (abi_actions, answers) = match (abi_actions.get(..slots), answers.get_mut(..slots))
            {
                (Some(a), Some(b)) => (a, b),
                _ => return,
            };
            self.cross(context, abi_actions, answers, decided);
        } else {
            let abi_actions: Vec<AbiAction> = actions.iter().map(abi_action).collect();
            let mut answers = vec![AbiAuthorization::default(); actions.len()];
            self.cross(context, &abi_actions, &mut answers, decided);
        }
    }

    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        let views = ContextViews::of(context);
        let abi_context = request_context(context, &views);
        // SAFETY: a validated function, our instance and a context (and views) that outlive the
        // call.
        let decision = unsafe {
            (self.functions.authorize_by_resource_type)(
                self.instance.as_ptr(),
                &abi_context,
                i32::from(operation.code()),
                i32::from(resource_type.code()),
            )
        };
        if decision == DECISION_ALLOWED {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }

    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        self.has_acl_admin.then_some(self as &dyn AclAdmin)
    }
}

impl DynamicAuthorizer {
    /// Calls an ACL function with encoded input; the encoded result, or the plugin's message.
    fn acl_call(&self, call: AclCallFn, input: &[u8]) -> Result<Vec<u8>, String> {
        let mut parts = Parts::new();
        let sink = parts.sink();
        // SAFETY: a validated function, our instance, input bytes and a sink that outlive the
        // call.
        let status = unsafe { call(self.instance.as_ptr(), AbiBytes::from_slice(input), &sink) };
        if status != STATUS_OK {
            return Err(parts.error_text("the plugin failed"));
        }
        parts
            .value
            .ok_or_else(|| "the plugin returned no result".to_owned())
    }

    fn store_error(&self, message: String) -> AclAdminError {
        AclAdminError::Store(format!("authorizer plugin {}: {message}", self.plugin))
    }
}

impl AclAdmin for DynamicAuthorizer {
    fn create_acls(&self, bindings: &[AclBinding]) -> Vec<Result<(), AclAdminError>> {
        let decoded = self
            .acl_call(
                self.functions.create_acls,
                &codec::encode_bindings(bindings),
            )
            .and_then(|out| codec::decode_create_results(&out).map_err(|e| e.to_string()));
        match decoded {
            Ok(results) if results.len() == bindings.len() => results,
            Ok(_) => bindings
                .iter()
                .map(|_| Err(self.store_error("answered for another number of ACLs".into())))
                .collect(),
            Err(message) => bindings
                .iter()
                .map(|_| Err(self.store_error(message.clone())))
                .collect(),
        }
    }

    fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>, AclAdminError> {
        let output = self
            .acl_call(self.functions.delete_acls, &codec::encode_filters(filters))
            .map_err(|m| self.store_error(m))?;
        codec::decode_delete_result(&output).map_err(|e| self.store_error(e.to_string()))?
    }

    fn describe_acls(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let described = self
            .acl_call(
                self.functions.describe_acls,
                &codec::encode_filters(std::slice::from_ref(filter)),
            )
            .and_then(|out| codec::decode_bindings(&out).map_err(|e| e.to_string()));
        match described {
            Ok(bindings) => bindings,
            Err(message) => {
                tracing::warn!(plugin = %self.plugin, %message, "describing ACLs failed");
                Vec::new()
            }
        }
    }
}
