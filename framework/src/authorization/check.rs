//! Asks the authorizer and remembers every answer, so the caller can hand the full list of
//! decisions to the audit log.

use std::collections::BTreeMap;

use crate::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::authorizer::{Action, Authorization, Authorizer, Decision, RequestContext};

/// One decision taken while enforcing a request, for the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Checked {
    /// `Authorizer::authorize` decided this action.
    Action {
        /// What was asked (its `log_if_*` flags say whether Kafka would log it).
        action: Action,
        /// The answer.
        authorization: Authorization,
    },
    /// `Authorizer::authorize_by_resource_type` (KIP-679) decided this.
    ResourceType {
        /// The operation.
        operation: AclOperation,
        /// The resource type.
        resource_type: ResourceType,
        /// The answer.
        decision: Decision,
    },
}

/// How loudly a check is logged: Kafka logs enforcement checks and keeps filtering and
/// authorized-operations bitfields quiet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loud {
    /// Log allowed and denied.
    Yes,
    /// Log only when allowed (Kafka's `logIfDenied = false` on an optional privilege).
    IfAllowed,
}

/// The authorizer plus the decisions taken so far.
pub(crate) struct Checker<'a> {
    authorizer: &'a dyn Authorizer,
    context: &'a RequestContext,
    pub(crate) decisions: Vec<Checked>,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(authorizer: &'a dyn Authorizer, context: &'a RequestContext) -> Self {
        Self {
            authorizer,
            context,
            decisions: Vec::new(),
        }
    }

    /// Decides one operation on one resource.
    pub(crate) fn allowed(
        &mut self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
        loud: Loud,
    ) -> bool {
        let action = with_loudness(Action::new(operation, resource_type, name), loud);
        self.decide(vec![action])
            .into_iter()
            .next()
            .unwrap_or(false)
    }

    /// Decides an operation on the cluster.
    pub(crate) fn cluster(&mut self, operation: AclOperation, loud: Loud) -> bool {
        self.allowed(operation, ResourceType::Cluster, CLUSTER_NAME, loud)
    }

    /// Decides `operation` on each distinct name once (with its reference count, like Kafka's
    /// `filterByAuthorized`), and returns the allowed names.
    pub(crate) fn allowed_names<'n>(
        &mut self,
        operation: AclOperation,
        resource_type: ResourceType,
        names: impl IntoIterator<Item = &'n str>,
        loud: Loud,
    ) -> std::collections::BTreeSet<String> {
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for name in names {
            let count = counts.entry(name).or_insert(0);
            *count = count.saturating_add(1);
        }
        let actions: Vec<Action> = counts
            .iter()
            .map(|(name, count)| {
                let mut action = with_loudness(Action::new(operation, resource_type, *name), loud);
                action.resource_reference_count = *count;
                action
            })
            .collect();
        let results = self.decide(actions);
        counts
            .keys()
            .zip(results)
            .filter(|(_, allowed)| *allowed)
            .map(|(name, _)| (*name).to_owned())
            .collect()
    }

    /// KIP-679: whether the principal may perform `operation` on some resource of the type.
    pub(crate) fn by_resource_type(
        &mut self,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        let decision =
            self.authorizer
                .authorize_by_resource_type(self.context, operation, resource_type);
        self.decisions.push(Checked::ResourceType {
            operation,
            resource_type,
            decision,
        });
        decision == Decision::Allowed
    }

    /// Kafka's authorized-operations bitfield: bit `op.code()` is set for each operation the
    /// resource type supports that this principal may perform (asked quietly).
    pub(crate) fn authorized_operations(&mut self, resource_type: ResourceType, name: &str) -> i32 {
        let actions: Vec<Action> = supported_operations(resource_type)
            .iter()
            .map(|op| Action::new(*op, resource_type, name).quiet())
            .collect();
        let ops: Vec<AclOperation> = actions.iter().map(|a| a.operation).collect();
        let results = self.decide(actions);
        ops.iter()
            .zip(results)
            .filter(|(_, allowed)| *allowed)
            .fold(0i32, |bits, (op, _)| {
                bits | 1i32.checked_shl(u32::from(op.code() as u8)).unwrap_or(0)
            })
    }

    /// Asks the authorizer; a missing answer (a misbehaving plugin) counts as denied.
    fn decide(&mut self, actions: Vec<Action>) -> Vec<bool> {
        if actions.is_empty() {
            return Vec::new();
        }
        let answers = self.authorizer.authorize(self.context, &actions);
        let mut out = Vec::with_capacity(actions.len());
        let mut answers = answers.into_iter();
        for action in actions {
            let authorization = answers.next().unwrap_or(Authorization {
                decision: Decision::Denied,
                rule: crate::authorizer::DecidingRule::DefaultDeny,
            });
            out.push(authorization.decision == Decision::Allowed);
            self.decisions.push(Checked::Action {
                action,
                authorization,
            });
        }
        out
    }
}

fn with_loudness(action: Action, loud: Loud) -> Action {
    match loud {
        Loud::Yes => action,
        Loud::IfAllowed => {
            let mut action = action;
            action.log_if_denied = false;
            action
        }
    }
}

/// The operations each resource type supports (Kafka's `AclEntry.supportedOperations`), used only
/// for authorized-operations bitfields.
pub(crate) fn supported_operations(resource_type: ResourceType) -> &'static [AclOperation] {
    use AclOperation::*;
    match resource_type {
        ResourceType::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
        ],
        ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
        ResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
        ResourceType::TransactionalId => &[Describe, Write],
        ResourceType::DelegationToken => &[Describe],
        ResourceType::User => &[CreateTokens, DescribeTokens],
        _ => &[],
    }
}
