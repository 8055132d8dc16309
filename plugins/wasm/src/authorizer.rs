//! `portcullis:plugin/authorizer` as an [`Authorizer`]: the principal and the actions become WIT
//! values, the rest of the request is answered when the component asks (`crate::request`), the
//! component answers one decision per action, and anything else — a trap, the
//! fuel or the memory cap, fewer decisions than actions — denies every action of the request
//! (as the C ABI's adapter does), with the `Failed` rule in the audit log.

use std::path::Path;
use std::sync::Arc;

use portcullis_plugin_api::acl::{AclOperation, ResourceType};
use portcullis_plugin_api::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis_plugin_api::principal::Principal;
use wasmtime::component::Component;

use crate::bindings::authorizer::exports::portcullis::plugin::authorizer as wit;
use crate::bindings::authorizer::{AuthorizerPlugin, AuthorizerPluginPre};
use crate::bindings::types;
use crate::engine::WasmRuntime;
use crate::error::{FailureKind, WasmError};
use crate::pool::{world_pre, Pool, Setup};
use crate::request::with_request;

world_pre!(
    AuthorizerPre,
    crate::engine::AUTHORIZER_WORLD,
    AuthorizerPluginPre,
    AuthorizerPlugin,
    crate::WasmKind::Authorizer,
    portcullis_plugin_authorizer
);

/// A component authorizer.
pub(crate) struct WasmAuthorizer {
    pool: Pool<AuthorizerPre>,
    /// The audit log's rule for the component's answers.
    rule: DecidingRule,
}

impl WasmAuthorizer {
    pub(crate) fn new(
        runtime: &WasmRuntime,
        path: &Path,
        component: &Component,
        setup: Setup,
    ) -> Result<Self, WasmError> {
        let rule = DecidingRule::Plugin {
            plugin: Arc::clone(&setup.name),
        };
        let pool = AuthorizerPre::pool(runtime, path, component, setup)?;
        Ok(Self { pool, rule })
    }

    fn deny_all(actions: &[Action<'_>]) -> Vec<Authorization> {
        actions
            .iter()
            .map(|_| Authorization::denied(DecidingRule::Failed))
            .collect()
    }
}

impl Authorizer for WasmAuthorizer {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        let wit_actions: Vec<wit::Action<'_>> = actions.iter().map(action).collect();
        let answer = self.pool.call("authorizing", |bindings, store| {
            with_request(store, context, |store, request| {
                bindings.portcullis_plugin_authorizer().call_authorize(
                    store,
                    borrowed_principal(&context.principal),
                    request,
                    &wit_actions,
                )
            })
        });
        match answer {
            Ok(decisions) if decisions.len() >= actions.len() => decisions
                .into_iter()
                .take(actions.len())
                .map(|d| Authorization::new(decision(d), self.rule.clone()))
                .collect(),
            Ok(decisions) => {
                let message = format!(
                    "{} decisions for {} actions",
                    decisions.len(),
                    actions.len()
                );
                self.pool
                    .report(FailureKind::BadAnswer, "authorizing", &message);
                Self::deny_all(actions)
            }
            Err(_failed) => Self::deny_all(actions),
        }
    }

    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        let answer = self
            .pool
            .call("authorizing by resource type", |bindings, store| {
                with_request(store, context, |store, request| {
                    bindings
                        .portcullis_plugin_authorizer()
                        .call_authorize_by_resource_type(
                            store,
                            borrowed_principal(&context.principal),
                            request,
                            acl_operation(operation),
                            resource_type_of(resource_type),
                        )
                })
            });
        answer.map_or(Decision::Denied, decision)
    }
}

fn borrowed_principal(principal: &Principal) -> types::PrincipalParam<'_> {
    types::PrincipalParam {
        kind: &principal.kind,
        name: &principal.name,
    }
}

fn action<'a>(action: &'a Action<'_>) -> wit::Action<'a> {
    wit::Action {
        operation: acl_operation(action.operation),
        resource_type: resource_type_of(action.resource.resource_type),
        resource_name: &action.resource.name,
    }
}

fn decision(decision: wit::Decision) -> Decision {
    match decision {
        wit::Decision::Allowed => Decision::Allowed,
        wit::Decision::Denied => Decision::Denied,
    }
}

fn acl_operation(operation: AclOperation) -> types::AclOperation {
    use types::AclOperation as W;
    match operation {
        AclOperation::Any => W::Any,
        AclOperation::All => W::All,
        AclOperation::Read => W::Read,
        AclOperation::Write => W::Write,
        AclOperation::Create => W::Create,
        AclOperation::Delete => W::Delete,
        AclOperation::Alter => W::Alter,
        AclOperation::Describe => W::Describe,
        AclOperation::ClusterAction => W::ClusterAction,
        AclOperation::DescribeConfigs => W::DescribeConfigs,
        AclOperation::AlterConfigs => W::AlterConfigs,
        AclOperation::IdempotentWrite => W::IdempotentWrite,
        AclOperation::CreateTokens => W::CreateTokens,
        AclOperation::DescribeTokens => W::DescribeTokens,
        _ => W::Unknown,
    }
}

fn resource_type_of(resource_type: ResourceType) -> types::ResourceType {
    use types::ResourceType as W;
    match resource_type {
        ResourceType::Any => W::Any,
        ResourceType::Topic => W::Topic,
        ResourceType::Group => W::Group,
        ResourceType::Cluster => W::Cluster,
        ResourceType::TransactionalId => W::TransactionalId,
        ResourceType::DelegationToken => W::DelegationToken,
        ResourceType::User => W::User,
        _ => W::Unknown,
    }
}
