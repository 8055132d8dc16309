//! The authorizer plugin kind: decides whether a principal may perform actions on resources,
//! with Kafka's semantics (kafka-security-semantics §6.2).

use std::net::IpAddr;

use crate::acl::{
    AclBinding, AclBindingFilter, AclOperation, InvalidAcl, ResourcePattern, ResourceType,
};
use crate::principal::Principal;

/// Who asks, from where, in which request.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RequestContext {
    /// The session's principal.
    pub principal: Principal,
    /// The client's address (ACL hosts compare against its string form).
    pub client_address: IpAddr,
    /// The listener's name.
    pub listener: String,
    /// The API key of the request.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id.
    pub correlation_id: i32,
    /// The client id.
    pub client_id: Option<String>,
}

impl RequestContext {
    /// Creates a context.
    pub fn new(
        principal: Principal,
        client_address: IpAddr,
        listener: impl Into<String>,
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
    ) -> Self {
        Self {
            principal,
            client_address,
            listener: listener.into(),
            api_key,
            api_version,
            correlation_id,
            client_id: None,
        }
    }
    /// Sets the client id.
    pub fn with_client_id(mut self, client_id: Option<String>) -> Self {
        self.client_id = client_id;
        self
    }
}

/// One thing to authorize: an operation on a LITERAL resource.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Action {
    /// The operation.
    pub operation: AclOperation,
    /// The resource (always LITERAL).
    pub resource: ResourcePattern,
    /// How many times the request references the resource (for the audit log).
    pub resource_reference_count: u32,
    /// Log the decision when allowed.
    pub log_if_allowed: bool,
    /// Log the decision when denied.
    pub log_if_denied: bool,
}

impl Action {
    /// An action that is logged on denial only (Kafka's default for most checks).
    pub fn new(
        operation: AclOperation,
        resource_type: ResourceType,
        name: impl Into<String>,
    ) -> Self {
        Self {
            operation,
            resource: ResourcePattern::literal(resource_type, name),
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
}

/// Allowed or denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
}

/// A decision and its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorization {
    /// The decision.
    pub decision: Decision,
    /// Why.
    pub rule: DecidingRule,
}

/// The authorizer plugin kind.
pub trait Authorizer: Send + Sync {
    /// Decides each action, in order.
    fn authorize(&self, context: &RequestContext, actions: &[Action]) -> Vec<Authorization>;

    /// Whether the principal may perform `operation` on at least one resource of the type
    /// (KIP-679: WRITE on any topic implies IDEMPOTENT_WRITE).
    fn authorize_by_resource_type(
        &self,
        context: &RequestContext,
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

impl Authorizer for FixedDecision {
    fn authorize(&self, _: &RequestContext, actions: &[Action]) -> Vec<Authorization> {
        let rule = match self.0 {
            Decision::Allowed => DecidingRule::DefaultAllow,
            Decision::Denied => DecidingRule::DefaultDeny,
        };
        actions
            .iter()
            .map(|_| Authorization {
                decision: self.0,
                rule: rule.clone(),
            })
            .collect()
    }

    fn authorize_by_resource_type(
        &self,
        _: &RequestContext,
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
    /// the records to persist and the per-binding results to answer once they are durable. An
    /// admin whose ACLs follow the metadata log implements it, so the ACL APIs write off the
    /// request path (`crate::local::Effect`); `None` makes them call `create_acls`.
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

/// ACL changes worked out but not yet written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedAclChange<T> {
    /// What to append to the metadata log (nothing when nothing changes).
    pub records: Vec<crate::store::MetadataRecord>,
    /// What to answer once the records are durable.
    pub outcome: T,
}
