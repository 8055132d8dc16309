//! Asks the authorizer and, when asked to, remembers every answer, so the caller can hand the
//! full list of decisions to the audit log.
//!
//! The request path allocates nothing here: actions borrow their resource names from the
//! request and live in inline vectors, the authorizer answers through
//! [`Authorizer::authorize_each`], and nothing is recorded unless the caller wants the decisions
//! ([`super::enforce`] does; [`super::enforce_verdict`], what the connection calls, does not).

use std::borrow::Cow;

use smallvec::SmallVec;

use crate::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};

/// How many resources of one request are handled without allocating (a producer or consumer
/// names a handful of topics; beyond this the vectors move to the heap).
const INLINE: usize = 8;

/// One decision taken while enforcing a request, for the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Checked {
    /// `Authorizer::authorize` decided this action.
    Action {
        /// What was asked (its `log_if_*` flags say whether Kafka would log it).
        action: Action<'static>,
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

/// The authorizer plus, when recording, the decisions taken so far.
pub(crate) struct Checker<'a> {
    authorizer: &'a dyn Authorizer,
    context: &'a RequestContext<'a>,
    record: bool,
    pub(crate) decisions: Vec<Checked>,
}

/// The distinct names of one [`Checker::allowed_names`] call, sorted, each with its answer
/// (borrowed from the request; owned when built from owned names, see [`FromIterator`]).
#[derive(Debug)]
pub(crate) struct AllowedNames<'n> {
    names: SmallVec<[(Cow<'n, str>, bool); INLINE]>,
}

impl AllowedNames<'_> {
    /// Whether `name` was asked about and allowed.
    pub(crate) fn contains<Q: AsRef<str> + ?Sized>(&self, name: &Q) -> bool {
        let name = name.as_ref();
        self.names
            .binary_search_by(|(n, _)| n.as_ref().cmp(name))
            .ok()
            .and_then(|i| self.names.get(i))
            .is_some_and(|(_, allowed)| *allowed)
    }

    /// The allowed names, in sorted order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.names
            .iter()
            .filter(|(_, allowed)| *allowed)
            .map(|(name, _)| name.as_ref())
    }

    /// Whether no name was allowed.
    pub(crate) fn is_empty(&self) -> bool {
        !self.names.iter().any(|(_, allowed)| *allowed)
    }
}

/// Every one of these names allowed (a decision taken for all of them at once, e.g. on the
/// cluster).
impl FromIterator<String> for AllowedNames<'_> {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        let mut names: SmallVec<[(Cow<'_, str>, bool); INLINE]> =
            names.into_iter().map(|n| (Cow::Owned(n), true)).collect();
        names.sort_unstable();
        names.dedup();
        Self { names }
    }
}

impl<'a> Checker<'a> {
    /// A checker that records every decision in [`Checker::decisions`] (`record`), or none.
    pub(crate) fn new(
        authorizer: &'a dyn Authorizer,
        context: &'a RequestContext<'a>,
        record: bool,
    ) -> Self {
        Self {
            authorizer,
            context,
            record,
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
        let mut allowed = false;
        self.decide(std::slice::from_ref(&action), |_, ok| allowed = ok);
        allowed
    }

    /// Decides an operation on the cluster.
    pub(crate) fn cluster(&mut self, operation: AclOperation, loud: Loud) -> bool {
        self.allowed(operation, ResourceType::Cluster, CLUSTER_NAME, loud)
    }

    /// Decides `operation` on each distinct name once (with its reference count, like Kafka's
    /// `filterByAuthorized`), in sorted order, and returns the answers.
    pub(crate) fn allowed_names<'n>(
        &mut self,
        operation: AclOperation,
        resource_type: ResourceType,
        names: impl IntoIterator<Item = &'n str>,
        loud: Loud,
    ) -> AllowedNames<'n> {
        let mut sorted: SmallVec<[&'n str; INLINE]> = names.into_iter().collect();
        sorted.sort_unstable();
        let mut counted: SmallVec<[(&'n str, u32); INLINE]> = SmallVec::new();
        for name in sorted {
            match counted.last_mut() {
                Some((last, count)) if *last == name => *count = count.saturating_add(1),
                _ => counted.push((name, 1)),
            }
        }
        let actions: SmallVec<[Action<'n>; INLINE]> = counted
            .iter()
            .map(|(name, count)| {
                let mut action = with_loudness(Action::new(operation, resource_type, *name), loud);
                action.resource_reference_count = *count;
                action
            })
            .collect();
        let mut answers = AllowedNames {
            names: counted
                .iter()
                .map(|(name, _)| (Cow::Borrowed(*name), false))
                .collect(),
        };
        self.decide(&actions, |i, ok| {
            if let Some((_, allowed)) = answers.names.get_mut(i) {
                *allowed = ok;
            }
        });
        answers
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
        if self.record {
            self.decisions.push(Checked::ResourceType {
                operation,
                resource_type,
                decision,
            });
        }
        decision == Decision::Allowed
    }

    /// Kafka's authorized-operations bitfield: bit `op.code()` is set for each operation the
    /// resource type supports that this principal may perform (asked quietly).
    pub(crate) fn authorized_operations(&mut self, resource_type: ResourceType, name: &str) -> i32 {
        let operations = supported_operations(resource_type);
        let actions: SmallVec<[Action<'_>; INLINE]> = operations
            .iter()
            .map(|op| Action::new(*op, resource_type, name).quiet())
            .collect();
        let mut bits = 0i32;
        self.decide(&actions, |i, ok| {
            if let (true, Some(op)) = (ok, operations.get(i)) {
                bits |= 1i32.checked_shl(u32::from(op.code() as u8)).unwrap_or(0);
            }
        });
        bits
    }

    /// Asks the authorizer and reports `(index, allowed)` for each action, in order; a missing
    /// answer (a misbehaving plugin) counts as denied.
    fn decide(&mut self, actions: &[Action<'_>], mut report: impl FnMut(usize, bool)) {
        if actions.is_empty() {
            return;
        }
        let mut answers: SmallVec<[Option<Authorization>; INLINE]> =
            actions.iter().map(|_| None).collect();
        self.authorizer
            .authorize_each(self.context, actions, &mut |i, answer| {
                if let Some(slot) = answers.get_mut(i) {
                    *slot = Some(answer);
                }
            });
        for (i, (action, answer)) in actions.iter().zip(answers).enumerate() {
            let authorization = answer.unwrap_or(Authorization::denied(DecidingRule::DefaultDeny));
            report(i, authorization.decision == Decision::Allowed);
            if self.record {
                self.decisions.push(Checked::Action {
                    action: action.clone().into_owned(),
                    authorization,
                });
            }
        }
    }
}

fn with_loudness(action: Action<'_>, loud: Loud) -> Action<'_> {
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

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Mutex;

    use super::*;
    use crate::principal::Principal;

    /// Allows names starting with `a` and remembers what it was asked.
    #[derive(Default)]
    struct Spy(Mutex<Vec<(String, u32)>>);

    impl Authorizer for Spy {
        fn authorize(&self, _: &RequestContext<'_>, actions: &[Action<'_>]) -> Vec<Authorization> {
            actions
                .iter()
                .map(|a| {
                    let mut asked = self.0.lock().unwrap();
                    asked.push((a.resource.name.to_string(), a.resource_reference_count));
                    Authorization {
                        decision: if a.resource.name.starts_with('a') {
                            Decision::Allowed
                        } else {
                            Decision::Denied
                        },
                        rule: DecidingRule::DefaultDeny,
                    }
                })
                .collect()
        }
        fn authorize_by_resource_type(
            &self,
            _: &RequestContext<'_>,
            _: AclOperation,
            _: ResourceType,
        ) -> Decision {
            Decision::Denied
        }
    }

    fn context() -> RequestContext<'static> {
        RequestContext::new(
            Principal::user("u"),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            "l",
            0,
            9,
            1,
        )
    }

    #[test]
    fn distinct_names_are_asked_once_in_sorted_order_with_their_counts() {
        let spy = Spy::default();
        let ctx = context();
        // Beyond the inline capacity too: the answers must not depend on where they live.
        let many: Vec<String> = (0..20).map(|i| format!("b{i:02}")).collect();
        for extra in [Vec::new(), many] {
            spy.0.lock().unwrap().clear();
            let mut names = vec!["b", "a2", "a1", "b", "a2", "a2"];
            names.extend(extra.iter().map(String::as_str));
            let mut chk = Checker::new(&spy, &ctx, true);
            let allowed = chk.allowed_names(
                AclOperation::Read,
                ResourceType::Topic,
                names.iter().copied(),
                Loud::Yes,
            );
            let asked = spy.0.lock().unwrap().clone();
            assert_eq!(
                &asked[..3],
                &[("a1".into(), 1), ("a2".into(), 3), ("b".into(), 2)]
            );
            assert_eq!(asked.len(), 3 + extra.len());
            assert!(asked.windows(2).all(|w| w[0].0 < w[1].0));
            assert_eq!(allowed.iter().collect::<Vec<_>>(), ["a1", "a2"]);
            assert!(allowed.contains("a1") && allowed.contains(&"a2".to_owned()));
            assert!(!allowed.contains("b") && !allowed.contains("zz"));
            assert!(!allowed.is_empty());
            assert_eq!(chk.decisions.len(), asked.len());
        }
    }

    #[test]
    fn unrecorded_checks_decide_the_same_and_keep_nothing() {
        let spy = Spy::default();
        let ctx = context();
        let mut recorded = Checker::new(&spy, &ctx, true);
        let mut quiet = Checker::new(&spy, &ctx, false);
        for chk in [&mut recorded, &mut quiet] {
            assert!(chk.allowed(AclOperation::Write, ResourceType::Topic, "a", Loud::Yes));
            assert!(!chk.allowed(AclOperation::Write, ResourceType::Topic, "b", Loud::Yes));
            assert!(!chk.by_resource_type(AclOperation::Write, ResourceType::Topic));
        }
        assert_eq!(recorded.decisions.len(), 3);
        assert!(quiet.decisions.is_empty());
    }

    #[test]
    fn a_missing_answer_is_a_denial() {
        struct Silent;
        impl Authorizer for Silent {
            fn authorize(&self, _: &RequestContext<'_>, _: &[Action<'_>]) -> Vec<Authorization> {
                Vec::new()
            }
            fn authorize_by_resource_type(
                &self,
                _: &RequestContext<'_>,
                _: AclOperation,
                _: ResourceType,
            ) -> Decision {
                Decision::Allowed
            }
        }
        let ctx = context();
        let mut chk = Checker::new(&Silent, &ctx, true);
        let allowed = chk.allowed_names(
            AclOperation::Read,
            ResourceType::Topic,
            ["x", "y"],
            Loud::Yes,
        );
        assert!(allowed.is_empty());
        assert_eq!(chk.authorized_operations(ResourceType::Topic, "x"), 0);
        assert!(matches!(
            &chk.decisions[0],
            Checked::Action { authorization, .. } if authorization.decision == Decision::Denied
        ));
    }

    #[test]
    fn names_allowed_at_once_are_all_allowed() {
        let allowed: AllowedNames<'_> = ["b".to_owned(), "a".to_owned(), "b".to_owned()]
            .into_iter()
            .collect();
        assert_eq!(allowed.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(allowed.contains("b"));
    }
}
