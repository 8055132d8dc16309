//! Forwarding policies decide, per request, where it is served (the trait is in the plugin API),
//! and the host's compositions around a policy: [`ScreenedAuthorizer`] enforces a policy's
//! per-action refusals through the authorization map, [`DenyApiKeys`] adds `[forwarding]
//! deny_api_keys` to any policy.

use std::sync::Arc;

pub use portcullis_plugin_api::forwarding::*;

use crate::acl::{AclOperation, ResourceType};
use crate::authorizer::{
    AclAdmin, Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use crate::errors::ErrorCode;

/// An authorizer whose decisions a forwarding policy may veto: an action the policy does not
/// admit ([`ForwardingPolicy::admits`]) is denied with [`DecidingRule::RefusedByPolicy`]; the
/// others are decided by the inner authorizer, or allowed when there is none. The connection's
/// authorization map then answers a refused action as Kafka answers a denied one, per topic, per
/// group, and the rest of the request goes on.
pub struct ScreenedAuthorizer {
    policy: Arc<dyn ForwardingPolicy>,
    policy_name: Arc<str>,
    inner: Option<Arc<dyn Authorizer>>,
}

impl ScreenedAuthorizer {
    /// Screens `inner` (or, without one, allows what the policy admits) with `policy`.
    pub fn new(policy: Arc<dyn ForwardingPolicy>, inner: Option<Arc<dyn Authorizer>>) -> Self {
        let policy_name = Arc::from(policy.name());
        Self {
            policy,
            policy_name,
            inner,
        }
    }

    fn refused(&self) -> Authorization {
        Authorization::denied(DecidingRule::RefusedByPolicy {
            policy: Arc::clone(&self.policy_name),
        })
    }
}

impl std::fmt::Debug for ScreenedAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScreenedAuthorizer")
            .field("policy", &self.policy_name)
            .field("authorizer", &self.inner.is_some())
            .finish()
    }
}

impl Authorizer for ScreenedAuthorizer {
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
        // The policy first, so a refused action never reaches the authorizer (nor its audit).
        let admitted: smallvec::SmallVec<[bool; 8]> = actions
            .iter()
            .map(|action| self.policy.admits(context, action))
            .collect();
        for (i, admitted) in admitted.iter().enumerate() {
            if !admitted {
                decided(i, self.refused());
            }
        }
        match &self.inner {
            None => {
                for (i, _) in admitted.iter().enumerate().filter(|(_, a)| **a) {
                    decided(i, Authorization::allowed(DecidingRule::DefaultAllow));
                }
            }
            Some(inner) if admitted.iter().all(|a| *a) => {
                inner.authorize_each(context, actions, decided);
            }
            Some(inner) => {
                // Only the admitted actions go to the authorizer; their answers are mapped back.
                let positions: smallvec::SmallVec<[usize; 8]> = admitted
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| **a)
                    .map(|(i, _)| i)
                    .collect();
                let subset: Vec<Action<'_>> = positions
                    .iter()
                    .filter_map(|&i| actions.get(i).cloned())
                    .collect();
                inner.authorize_each(context, &subset, &mut |j, answer| {
                    if let Some(&i) = positions.get(j) {
                        decided(i, answer);
                    }
                });
            }
        }
    }

    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        match &self.inner {
            Some(inner) => inner.authorize_by_resource_type(context, operation, resource_type),
            None => Decision::Allowed,
        }
    }

    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        self.inner.as_deref().and_then(|inner| inner.acl_admin())
    }
}

/// A policy with `[forwarding] deny_api_keys` applied in front of it: a listed API key is refused
/// with POLICY_VIOLATION, anything else is the inner policy's to route. (The built-in
/// `passthrough` applies the list itself.)
pub struct DenyApiKeys {
    deny: Vec<i16>,
    inner: Arc<dyn ForwardingPolicy>,
}

impl DenyApiKeys {
    /// Denies `deny` in front of `inner`.
    pub fn new(deny: Vec<i16>, inner: Arc<dyn ForwardingPolicy>) -> Self {
        Self { deny, inner }
    }
}

impl ForwardingPolicy for DenyApiKeys {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn route(&self, request: &RequestInfo<'_>) -> Route {
        if self.deny.contains(&request.api_key) {
            Route::Reject(ErrorCode::POLICY_VIOLATION)
        } else {
            self.inner.route(request)
        }
    }
    fn screens_actions(&self) -> bool {
        self.inner.screens_actions()
    }
    fn admits(&self, context: &RequestContext<'_>, action: &Action<'_>) -> bool {
        self.inner.admits(context, action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authorizer::FixedDecision;
    use crate::principal::Principal;

    /// Refuses WRITE on topics starting with `secret`.
    struct NoSecrets;

    impl ForwardingPolicy for NoSecrets {
        fn name(&self) -> &str {
            "no-secrets"
        }
        fn route(&self, request: &RequestInfo<'_>) -> Route {
            Route::standard(request.api_key)
        }
        fn screens_actions(&self) -> bool {
            true
        }
        fn admits(&self, _: &RequestContext<'_>, action: &Action<'_>) -> bool {
            !(action.operation == AclOperation::Write && action.resource.name.starts_with("secret"))
        }
    }

    fn decide(screened: &ScreenedAuthorizer) -> Vec<(Decision, DecidingRule)> {
        let principal = Principal::user("alice");
        let context = RequestContext::new(&principal, [127, 0, 0, 1].into(), "l", 0, 9, 1);
        let actions = [
            Action::new(AclOperation::Write, ResourceType::Topic, "secret-1"),
            Action::new(AclOperation::Write, ResourceType::Topic, "public"),
            Action::new(AclOperation::Describe, ResourceType::Topic, "secret-2"),
        ];
        let mut answers = vec![None; actions.len()];
        screened.authorize_each(&context, &actions, &mut |i, a| {
            answers[i] = Some((a.decision, a.rule))
        });
        answers.into_iter().map(Option::unwrap).collect()
    }

    #[test]
    fn refused_actions_are_denied_and_the_rest_is_the_authorizers() {
        let refused = DecidingRule::RefusedByPolicy {
            policy: Arc::from("no-secrets"),
        };
        let without = ScreenedAuthorizer::new(Arc::new(NoSecrets), None);
        assert_eq!(
            decide(&without),
            vec![
                (Decision::Denied, refused.clone()),
                (Decision::Allowed, DecidingRule::DefaultAllow),
                (Decision::Allowed, DecidingRule::DefaultAllow),
            ]
        );
        let deny_all: Arc<dyn Authorizer> = Arc::new(FixedDecision(Decision::Denied));
        let with = ScreenedAuthorizer::new(Arc::new(NoSecrets), Some(deny_all));
        assert_eq!(
            decide(&with),
            vec![
                (Decision::Denied, refused),
                (Decision::Denied, DecidingRule::DefaultDeny),
                (Decision::Denied, DecidingRule::DefaultDeny),
            ]
        );
    }

    #[test]
    fn denied_api_keys_come_before_the_policy() {
        let policy = DenyApiKeys::new(vec![20], Arc::new(NoSecrets));
        let p = Principal::user("a");
        assert_eq!(
            policy.route(&RequestInfo::new(20, 1, &p)),
            Route::Reject(ErrorCode::POLICY_VIOLATION)
        );
        assert_eq!(policy.route(&RequestInfo::new(17, 1, &p)), Route::Local);
        assert!(policy.screens_actions());
    }
}
