//! The authorizer plugin kind: decides whether a principal may perform actions on resources,
//! with Kafka's semantics (kafka-security-semantics §6.2).

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use crate::acl::{
    AclBinding, AclBindingFilter, AclOperation, InvalidAcl, PatternType, ResourcePattern,
    ResourceType,
};
use crate::principal::Principal;

/// Who asks, from where, in which request.
///
/// Borrowed from the session and the request header on the request path (building one allocates
/// nothing); [`RequestContext::into_owned`] makes a `'static` copy for what outlives the request
/// (a response plan that asks the authorizer again when the upstream answers).
///
/// A session authenticated with a bearer token (OAUTHBEARER) also carries what the token said:
/// its groups as [`GROUP_TYPE`](crate::principal::GROUP_TYPE) principals, its scopes and its id.
/// Every other session has none of them (empty, `None`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RequestContext<'a> {
    /// The session's principal.
    pub principal: Cow<'a, Principal>,
    /// The client's address (ACL hosts compare against its string form).
    pub client_address: IpAddr,
    /// The listener's name.
    pub listener: Cow<'a, str>,
    /// The API key of the request.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id.
    pub correlation_id: i32,
    /// The client id.
    pub client_id: Option<Cow<'a, str>>,
    /// The session's group principals (`Group:<name>`, one per group of the client's bearer
    /// token, without duplicates), empty for a session without groups. The built-in `acl`
    /// authorizer checks the ACLs of [`principal`](Self::principal) and of every group: a DENY
    /// matching any of them denies, otherwise an ALLOW matching any of them allows; super users
    /// are matched on `principal` only.
    pub groups: Cow<'a, [Principal]>,
    /// The scopes of the client's bearer token, in the token's order; empty without a token.
    pub scopes: Cow<'a, [String]>,
    /// The id (`jti` claim) of the client's bearer token, when it has one. Never the token.
    pub jti: Option<Cow<'a, str>>,
}

impl<'a> RequestContext<'a> {
    /// Creates a context (`principal` and `listener` by reference or by value), without groups,
    /// scopes or token id.
    pub fn new(
        principal: impl Into<Cow<'a, Principal>>,
        client_address: IpAddr,
        listener: impl Into<Cow<'a, str>>,
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
    ) -> Self {
        Self {
            principal: principal.into(),
            client_address,
            listener: listener.into(),
            api_key,
            api_version,
            correlation_id,
            client_id: None,
            groups: Cow::Borrowed(&[]),
            scopes: Cow::Borrowed(&[]),
            jti: None,
        }
    }
    /// Sets the client id.
    pub fn with_client_id<C: Into<Cow<'a, str>>>(mut self, client_id: Option<C>) -> Self {
        self.client_id = client_id.map(Into::into);
        self
    }
    /// Sets the session's group principals (a slice borrowed from the session, or owned).
    pub fn with_groups(mut self, groups: impl Into<Cow<'a, [Principal]>>) -> Self {
        self.groups = groups.into();
        self
    }
    /// Sets the bearer token's scopes (a slice borrowed from the session, or owned).
    pub fn with_scopes(mut self, scopes: impl Into<Cow<'a, [String]>>) -> Self {
        self.scopes = scopes.into();
        self
    }
    /// Sets the bearer token's id (`jti`).
    pub fn with_jti<J: Into<Cow<'a, str>>>(mut self, jti: Option<J>) -> Self {
        self.jti = jti.map(Into::into);
        self
    }
    /// The principal, then each group principal: every principal whose ACLs apply.
    pub fn principals(&self) -> impl Iterator<Item = &Principal> + '_ {
        std::iter::once(self.principal.as_ref()).chain(self.groups.iter())
    }
    /// The same context owning everything it holds.
    pub fn into_owned(self) -> RequestContext<'static> {
        RequestContext {
            principal: Cow::Owned(self.principal.into_owned()),
            client_address: self.client_address,
            listener: Cow::Owned(self.listener.into_owned()),
            api_key: self.api_key,
            api_version: self.api_version,
            correlation_id: self.correlation_id,
            client_id: self.client_id.map(|c| Cow::Owned(c.into_owned())),
            groups: Cow::Owned(self.groups.into_owned()),
            scopes: Cow::Owned(self.scopes.into_owned()),
            jti: self.jti.map(|j| Cow::Owned(j.into_owned())),
        }
    }
}

impl From<Principal> for Cow<'_, Principal> {
    fn from(principal: Principal) -> Self {
        Cow::Owned(principal)
    }
}

impl<'a> From<&'a Principal> for Cow<'a, Principal> {
    fn from(principal: &'a Principal) -> Self {
        Cow::Borrowed(principal)
    }
}

/// The resource an [`Action`] names: always LITERAL, its name borrowed from the request where
/// possible. Displays as [`ResourcePattern`] does (`TOPIC:LITERAL:orders`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActionResource<'a> {
    /// The resource type.
    pub resource_type: ResourceType,
    /// The name.
    pub name: Cow<'a, str>,
    /// LITERAL for every action the framework builds (an authorizer denies anything else).
    pub pattern_type: PatternType,
}

impl<'a> ActionResource<'a> {
    /// A LITERAL resource.
    pub fn literal(resource_type: ResourceType, name: impl Into<Cow<'a, str>>) -> Self {
        Self {
            resource_type,
            name: name.into(),
            pattern_type: PatternType::Literal,
        }
    }
    /// The same resource owning its name.
    pub fn into_owned(self) -> ActionResource<'static> {
        ActionResource {
            resource_type: self.resource_type,
            name: Cow::Owned(self.name.into_owned()),
            pattern_type: self.pattern_type,
        }
    }
    /// As a stored-ACL resource pattern.
    pub fn to_pattern(&self) -> ResourcePattern {
        ResourcePattern::new(self.resource_type, self.name.as_ref(), self.pattern_type)
    }
}

impl fmt::Display for ActionResource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.resource_type, self.pattern_type, self.name
        )
    }
}

/// One thing to authorize: an operation on a LITERAL resource.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Action<'a> {
    /// The operation.
    pub operation: AclOperation,
    /// The resource (always LITERAL).
    pub resource: ActionResource<'a>,
    /// How many times the request references the resource (for the audit log).
    pub resource_reference_count: u32,
    /// Log the decision when allowed.
    pub log_if_allowed: bool,
    /// Log the decision when denied.
    pub log_if_denied: bool,
}

impl<'a> Action<'a> {
    /// An action that is logged on denial only (Kafka's default for most checks).
    pub fn new(
        operation: AclOperation,
        resource_type: ResourceType,
        name: impl Into<Cow<'a, str>>,
    ) -> Self {
        Self {
            operation,
            resource: ActionResource::literal(resource_type, name),
            resource_reference_count: 1,
            log_if_allowed: true,
            log_if_denied: true,
        }
    }
    /// An action whose outcome is not logged (filtering, authorized-operations bitfields).
    pub fn quiet(mut self) -> Self {
        self.log_if_allowed = false;
        self.log_if_denied = false;
        self
    }
    /// The same action owning its resource name.
    pub fn into_owned(self) -> Action<'static> {
        Action {
            operation: self.operation,
            resource: self.resource.into_owned(),
            resource_reference_count: self.resource_reference_count,
            log_if_allowed: self.log_if_allowed,
            log_if_denied: self.log_if_denied,
        }
    }
}

/// Allowed or denied. Code that matches on it treats any variant it does not know as denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Decision {
    /// Allowed.
    Allowed,
    /// Denied.
    Denied,
}

/// What decided (for the audit log).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecidingRule {
    /// The principal is a super user.
    SuperUser,
    /// This ACL matched.
    MatchingAcl(std::sync::Arc<AclBinding>),
    /// No ACL exists for the resource and `allow_everyone_if_no_acl_found` is set.
    DefaultAllow,
    /// No matching ALLOW.
    DefaultDeny,
    /// A dynamic plugin decided by a rule of its own (an ACL it did not hand over, a naming
    /// convention, ...).
    Plugin {
        /// The plugin's name.
        plugin: std::sync::Arc<str>,
    },
    /// The forwarding policy refused the action ([`crate::forwarding::ForwardingPolicy::admits`]).
    RefusedByPolicy {
        /// The policy's name.
        policy: std::sync::Arc<str>,
    },
    /// The authorizer failed (a dynamic plugin panicked): denied, failing closed.
    Failed,
}

/// A decision and its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorization {
    /// The decision.
    pub decision: Decision,
    /// Why.
    pub rule: DecidingRule,
}

impl Authorization {
    /// A decision with its reason.
    pub fn new(decision: Decision, rule: DecidingRule) -> Self {
        Self { decision, rule }
    }
    /// Allowed by `rule`.
    pub fn allowed(rule: DecidingRule) -> Self {
        Self::new(Decision::Allowed, rule)
    }
    /// Denied by `rule`.
    pub fn denied(rule: DecidingRule) -> Self {
        Self::new(Decision::Denied, rule)
    }
    /// Whether the action may go ahead (an unknown decision never does).
    pub fn is_allowed(&self) -> bool {
        self.decision == Decision::Allowed
    }
}

/// The authorizer plugin kind.
pub trait Authorizer: Send + Sync {
    /// Decides each action, in order.
    fn authorize(&self, context: &RequestContext<'_>, actions: &[Action<'_>])
        -> Vec<Authorization>;

    /// Decides each action, in order, calling `decided(i, answer)` once for action `i`: the form
    /// the request path uses, so that an authorizer which overrides it authorizes a request
    /// without allocating. The default collects [`Authorizer::authorize`] (an answer it leaves
    /// out is treated by the caller as denied).
    fn authorize_each(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        for (i, answer) in self
            .authorize(context, actions)
            .into_iter()
            .take(actions.len())
            .enumerate()
        {
            decided(i, answer);
        }
    }

    /// Whether the principal may perform `operation` on at least one resource of the type
    /// (KIP-679: WRITE on any topic implies IDEMPOTENT_WRITE).
    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision;

    /// The ACL administration capability, if this authorizer stores ACLs.
    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        None
    }
}

/// An authorizer that answers every action the same way: what a forwarding policy's refusal is
/// answered with (every resource denied), and a fixed answer for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedDecision(pub Decision);

impl FixedDecision {
    fn answer(self) -> Authorization {
        let rule = match self.0 {
            Decision::Allowed => DecidingRule::DefaultAllow,
            Decision::Denied => DecidingRule::DefaultDeny,
        };
        Authorization::new(self.0, rule)
    }
}

impl Authorizer for FixedDecision {
    fn authorize(&self, _: &RequestContext<'_>, actions: &[Action<'_>]) -> Vec<Authorization> {
        actions.iter().map(|_| self.answer()).collect()
    }

    fn authorize_each(
        &self,
        _: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        for i in 0..actions.len() {
            decided(i, self.answer());
        }
    }

    fn authorize_by_resource_type(
        &self,
        _: &RequestContext<'_>,
        _: AclOperation,
        _: ResourceType,
    ) -> Decision {
        self.0
    }
}

/// Why an ACL operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AclAdminError {
    /// The binding is invalid (INVALID_REQUEST).
    #[error(transparent)]
    Invalid(#[from] InvalidAcl),
    /// The store failed (UNKNOWN_SERVER_ERROR).
    #[error("ACL store error: {0}")]
    Store(String),
}

/// Create, describe and delete ACLs.
pub trait AclAdmin: Send + Sync {
    /// Creates bindings; one result per binding. Valid bindings are stored even when others fail.
    fn create_acls(&self, bindings: &[AclBinding]) -> Vec<Result<(), AclAdminError>>;
    /// Deletes every ACL matching each filter, atomically across all filters; returns the deleted
    /// bindings per filter.
    fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>, AclAdminError>;
    /// Every ACL matching the filter.
    fn describe_acls(&self, filter: &AclBindingFilter) -> Vec<AclBinding>;
    /// Works out [`create_acls`](AclAdmin::create_acls) against the current ACLs without writing:
    /// the changes to persist and the per-binding results to answer once they are durable. An
    /// admin whose ACLs follow the host's metadata log implements it, so the ACL APIs write off
    /// the request path; `None` makes them call `create_acls`.
    fn prepare_create_acls(
        &self,
        bindings: &[AclBinding],
    ) -> Option<PreparedAclChange<Vec<Result<(), AclAdminError>>>> {
        let _ = bindings;
        None
    }
    /// Works out [`delete_acls`](AclAdmin::delete_acls) without writing (see
    /// [`prepare_create_acls`](AclAdmin::prepare_create_acls)).
    fn prepare_delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Option<PreparedAclChange<Vec<Vec<AclBinding>>>> {
        let _ = filters;
        None
    }
}

/// One change to the stored ACLs (an ACL exists or not: there is nothing else to change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AclChange {
    /// Store this ACL.
    Create(AclBinding),
    /// Remove this ACL.
    Delete(AclBinding),
}

/// ACL changes worked out but not yet written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedAclChange<T> {
    /// What to write to the metadata log (nothing when nothing changes).
    pub changes: Vec<AclChange>,
    /// What to answer once the changes are durable.
    pub outcome: T,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_borrows_its_token_facts_and_owns_them_when_asked() {
        let alice = Principal::user("alice");
        let groups = [Principal::group("readers"), Principal::group("ops")];
        let scopes = ["kafka.read".to_owned()];
        let context = RequestContext::new(&alice, IpAddr::from([10, 0, 0, 1]), "l", 0, 9, 1)
            .with_groups(&groups[..])
            .with_scopes(&scopes[..])
            .with_jti(Some("t-1"));
        assert!(matches!(context.groups, Cow::Borrowed(_)));
        let all: Vec<String> = context.principals().map(ToString::to_string).collect();
        assert_eq!(all, ["User:alice", "Group:readers", "Group:ops"]);
        let owned: RequestContext<'static> = context.clone().into_owned();
        assert_eq!(&*owned.groups, &groups[..]);
        assert_eq!(&*owned.scopes, &scopes[..]);
        assert_eq!(owned.jti.as_deref(), Some("t-1"));
        // Without a token: nothing, and nothing allocated.
        let plain = RequestContext::new(&alice, IpAddr::from([10, 0, 0, 1]), "l", 0, 9, 1);
        assert!(plain.groups.is_empty() && plain.scopes.is_empty() && plain.jti.is_none());
        assert_eq!(plain.principals().count(), 1);
    }
}
