//! [`AclAuthorizer`]: Kafka's StandardAuthorizer semantics over a persistent ACL log.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use arc_swap::ArcSwap;
use portcullis::acl::{
    validate_for_create, AclBinding, AclBindingFilter, AclOperation, PatternType, ResourceType,
};
use portcullis::authorizer::{
    AclAdmin, AclAdminError, AclChange, Action, Authorization, Authorizer, DecidingRule, Decision,
    PreparedAclChange, RequestContext,
};
use portcullis::events::{Event, EventBus};
use portcullis::principal::Principal;
use portcullis::registry::{LiveAllowEveryone, LiveSuperUsers};
use portcullis::store::{MetadataRecord, MetadataStore, StoreError};

use crate::index::{Client, Index, Outcome};
use crate::super_users;

/// The log target of the authorization audit log (Kafka's `kafka.authorizer.logger`).
pub const AUDIT_TARGET: &str = "portcullis::authorizer::audit";

/// The resource name Kafka's default `authorizeByResourceType` first authorizes, so that super
/// users (and anything else that allows this name) win over DENY ACLs.
const HARDCODE_RESOURCE: &str = "hardcode";

/// The authorizer's configuration (Kafka's `super.users`, `allow.everyone.if.no.acl.found`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AclAuthorizerConfig {
    /// Principals allowed everything. Each entry is trimmed, empty entries are ignored, and
    /// every other entry must parse as `type:name`; matching is by exact string.
    pub super_users: Vec<String>,
    /// The decision when no ACL at all applies to the resource (default false: DENIED).
    pub allow_everyone_if_no_acl_found: bool,
}

impl AclAuthorizerConfig {
    /// Creates a configuration.
    pub fn new(super_users: Vec<String>, allow_everyone_if_no_acl_found: bool) -> Self {
        Self {
            super_users,
            allow_everyone_if_no_acl_found,
        }
    }

    /// Kafka's parsing of `super.users` (`;`-separated).
    pub fn super_users_from(config_value: &str) -> Vec<String> {
        config_value.split(';').map(str::to_owned).collect()
    }
}

/// Why the authorizer cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AclAuthorizerError {
    /// A `super_users` entry is not `type:name`.
    #[error("invalid super user '{0}': expected 'type:name'")]
    InvalidSuperUser(String),
    /// The metadata store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The log holds an ACL that could never have been created (for example a principal without
    /// `:`, KAFKA-18051). Ignoring it could drop a DENY, so the node refuses to start.
    #[error("metadata log holds an invalid ACL {binding}: {reason}")]
    InvalidStoredAcl {
        /// The ACL.
        binding: Box<AclBinding>,
        /// Why it is invalid.
        reason: String,
    },
}

impl From<super_users::InvalidSuperUser> for AclAuthorizerError {
    fn from(e: super_users::InvalidSuperUser) -> Self {
        AclAuthorizerError::InvalidSuperUser(e.0)
    }
}

/// Kafka's StandardAuthorizer (kafka-security-semantics §6.2, §6.3, §6.5) with an index that
/// answers without scanning ACLs, over the node's [`MetadataStore`].
///
/// Beyond Kafka, a session's group principals ([`RequestContext::groups`], `Group:<name>` from
/// a bearer token's groups claim) are matched too, Kafka's rules applied to the set of the user
/// principal, its groups and `User:*`: a DENY matching any of them denies, otherwise an ALLOW
/// matching any of them allows; `allow_everyone_if_no_acl_found` is unchanged (no ACL at all on
/// the resource). Super users are matched on the user principal only: a group is never a super
/// user. Without groups every decision is Kafka's.
///
/// Readers load an immutable snapshot ([`ArcSwap`]) and never lock. The ACLs are a view of the
/// metadata log: the authorizer subscribes to the store, and every ACL record appended (by this
/// authorizer, or by the node's ACL APIs through the store writer) becomes a new snapshot before
/// the append returns, so changes apply to live connections at once and survive restarts.
pub struct AclAuthorizer {
    /// Normalised (trimmed, no empty entries); shared with the host when it reloads them.
    super_users: LiveSuperUsers,
    /// Shared with the host when it reloads it.
    allow_everyone_if_no_acl_found: LiveAllowEveryone,
    index: Arc<ArcSwap<Index>>,
    store: Arc<dyn MetadataStore>,
    events: Arc<OnceLock<EventBus>>,
    /// Serialises ACL changes so the store's order and the snapshot's order agree.
    writer: Mutex<()>,
    /// Serialises snapshot updates (from the subscription, and the direct apply after an append
    /// to a store that cannot be followed).
    applier: Arc<Mutex<()>>,
}

impl fmt::Debug for AclAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclAuthorizer")
            .field("super_users", &*self.super_users.load())
            .field(
                "allow_everyone_if_no_acl_found",
                &self.allow_everyone_if_no_acl_found.get(),
            )
            .field("acls", &self.index.load().len())
            .finish_non_exhaustive()
    }
}

impl AclAuthorizer {
    /// Validates the configuration and replays the ACL records of `store`.
    pub fn open(
        config: &AclAuthorizerConfig,
        store: Arc<dyn MetadataStore>,
    ) -> Result<Self, AclAuthorizerError> {
        let super_users = super_users::normalise(&config.super_users)?;
        // Replay into a buffer and build the index once, then apply what follows record by
        // record: building incrementally from a large log would copy the index per chunk.
        let index: Arc<ArcSwap<Index>> = Arc::new(ArcSwap::from_pointee(Index::default()));
        let events: Arc<OnceLock<EventBus>> = Arc::new(OnceLock::new());
        let applier = Arc::new(Mutex::new(()));
        let replay_buffer: Arc<Mutex<Option<Vec<MetadataRecord>>>> =
            Arc::new(Mutex::new(Some(Vec::new())));
        let follower = {
            let (index, events, applier, buffer) = (
                Arc::clone(&index),
                Arc::clone(&events),
                Arc::clone(&applier),
                Arc::clone(&replay_buffer),
            );
            move |records: &[portcullis::store::StoredRecord]| {
                let mut buffer = buffer.lock().unwrap_or_else(PoisonError::into_inner);
                match buffer.as_mut() {
                    Some(replayed) => replayed.extend(
                        records
                            .iter()
                            .filter(|r| is_acl_record(&r.record))
                            .map(|r| r.record.clone()),
                    ),
                    None => {
                        drop(buffer);
                        apply_acl_records(
                            &index,
                            &events,
                            &applier,
                            records.iter().map(|r| &r.record),
                        );
                    }
                }
            }
        };
        store.subscribe(0, Box::new(follower))?;
        let replayed = replay_buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default();
        index.store(Arc::new(Index::build(replay(replayed)?)));
        tracing::info!(acls = index.load().len(), "ACL authorizer loaded");
        Ok(Self {
            super_users: LiveSuperUsers::new(super_users),
            allow_everyone_if_no_acl_found: LiveAllowEveryone::new(
                config.allow_everyone_if_no_acl_found,
            ),
            index,
            store,
            events,
            writer: Mutex::new(()),
            applier,
        })
    }

    /// Reads the super users from `live` from now on, which the host may replace (a
    /// configuration reload); the validated list this authorizer was opened with goes into it
    /// first.
    pub fn with_live_super_users(mut self, live: LiveSuperUsers) -> Self {
        live.store(self.super_users.load().as_ref().clone());
        self.super_users = live;
        self
    }

    /// Reads `allow_everyone_if_no_acl_found` from `live` from now on (the host may change it on
    /// a reload); the value this authorizer was opened with goes into it first.
    pub fn with_live_allow_everyone(mut self, live: LiveAllowEveryone) -> Self {
        live.set(self.allow_everyone_if_no_acl_found.get());
        self.allow_everyone_if_no_acl_found = live;
        self
    }

    /// Publishes [`Event::AclsChanged`] on `events` after each change.
    pub fn with_events(self, events: EventBus) -> Self {
        let _ = self.events.set(events);
        self
    }

    /// How many ACLs are stored.
    pub fn acl_count(&self) -> usize {
        self.index.load().len()
    }

    /// The decision alone, without building the deciding rule: no allocation. Same result as
    /// [`Authorizer::authorize`] for this action.
    pub fn decide(&self, context: &RequestContext<'_>, action: &Action<'_>) -> Decision {
        if self.is_super_user(&context.principal) {
            return Decision::Allowed;
        }
        if action.resource.pattern_type != PatternType::Literal {
            return Decision::Denied;
        }
        let index = self.index.load();
        let client = index.client(&context.principal, &context.groups, context.client_address);
        self.decide_on(
            &index,
            &client,
            action.operation,
            action.resource.resource_type,
            &action.resource.name,
        )
    }

    /// The decision for a LITERAL resource, given the snapshot and the resolved client.
    fn decide_on(
        &self,
        index: &Index,
        client: &Client,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> Decision {
        match index.decide(client, operation, resource_type, name) {
            Outcome::Allow(..) => Decision::Allowed,
            Outcome::NoAcls if self.allow_everyone_if_no_acl_found.get() => Decision::Allowed,
            Outcome::Deny(..) | Outcome::NoMatch | Outcome::NoAcls => Decision::Denied,
        }
    }

    fn is_super_user(&self, principal: &Principal) -> bool {
        super_users::contains(&self.super_users.load(), principal)
    }

    fn authorize_one(&self, index: &Index, client: &Client, action: &Action<'_>) -> Authorization {
        if action.resource.pattern_type != PatternType::Literal {
            // Kafka throws IllegalArgumentException; the plugin API has no error here, so the
            // action is denied (callers only ever build LITERAL actions).
            tracing::warn!(resource = %action.resource, "authorize() called with a non-LITERAL resource");
            return Authorization::denied(DecidingRule::DefaultDeny);
        }
        let outcome = index.decide(
            client,
            action.operation,
            action.resource.resource_type,
            &action.resource.name,
        );
        let (decision, rule) = match outcome {
            Outcome::Deny(acls, i) => (Decision::Denied, matching(acls.binding(i))),
            Outcome::Allow(acls, i) => (Decision::Allowed, matching(acls.binding(i))),
            Outcome::NoAcls if self.allow_everyone_if_no_acl_found.get() => {
                (Decision::Allowed, DecidingRule::DefaultAllow)
            }
            Outcome::NoMatch | Outcome::NoAcls => (Decision::Denied, DecidingRule::DefaultDeny),
        };
        Authorization::new(decision, rule)
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn is_acl_record(record: &MetadataRecord) -> bool {
    matches!(
        record,
        MetadataRecord::Acl { .. } | MetadataRecord::RemoveAcl { .. }
    )
}

/// Applies ACL records (in log order) to the snapshot and publishes what changed. Applying the
/// same records twice changes nothing the second time.
fn apply_acl_records<'a>(
    index: &ArcSwap<Index>,
    events: &OnceLock<EventBus>,
    applier: &Mutex<()>,
    records: impl Iterator<Item = &'a MetadataRecord>,
) {
    // The last record of a binding decides whether it exists.
    let mut last: BTreeMap<&AclBinding, bool> = BTreeMap::new();
    for record in records {
        match record {
            MetadataRecord::Acl { binding } => {
                last.insert(binding, true);
            }
            MetadataRecord::RemoveAcl { binding } => {
                last.insert(binding, false);
            }
            _ => {}
        }
    }
    if last.is_empty() {
        return;
    }
    let _serial = applier.lock().unwrap_or_else(PoisonError::into_inner);
    let current = index.load_full();
    let add: Vec<AclBinding> = last
        .iter()
        .filter(|(b, present)| **present && !current.contains(b))
        .map(|(b, _)| (*b).clone())
        .collect();
    let remove: Vec<AclBinding> = last
        .iter()
        .filter(|(b, present)| !**present && current.contains(b))
        .map(|(b, _)| (*b).clone())
        .collect();
    if add.is_empty() && remove.is_empty() {
        return;
    }
    let mut next = (*current).clone();
    let (added, removed) = next.apply(add, remove);
    index.store(Arc::new(next));
    if let Some(events) = events.get() {
        events.publish(Event::AclsChanged {
            created: added.len(),
            deleted: removed.len(),
        });
    }
}

fn matching(binding: Option<Arc<AclBinding>>) -> DecidingRule {
    binding.map_or(DecidingRule::DefaultDeny, DecidingRule::MatchingAcl)
}

/// Replays ACL records in log order.
fn replay(records: Vec<MetadataRecord>) -> Result<BTreeSet<AclBinding>, AclAuthorizerError> {
    let mut live = BTreeSet::new();
    for record in records {
        match record {
            MetadataRecord::Acl { binding } => {
                live.insert(binding);
            }
            MetadataRecord::RemoveAcl { binding } => {
                live.remove(&binding);
            }
            _ => {}
        }
    }
    for binding in &live {
        if let Err(invalid) = validate_for_create(binding) {
            return Err(AclAuthorizerError::InvalidStoredAcl {
                binding: Box::new(binding.clone()),
                reason: invalid.to_string(),
            });
        }
    }
    Ok(live)
}

/// Kafka's audit line for one decision (`kafka.authorizer.logger`). Its fields are formatted only
/// when a subscriber takes the event at that level: an allowed decision is logged at DEBUG, so
/// at the default INFO level nothing is built for it.
fn audit(context: &RequestContext<'_>, action: &Action<'_>, authorization: &Authorization) {
    let rule = RuleDisplay(&authorization.rule);
    macro_rules! line {
        ($level:ident, $verdict:literal) => {
            tracing::$level!(
                target: AUDIT_TARGET,
                principal = %context.principal,
                operation = %action.operation,
                host = %crate::host::java_host_address(context.client_address),
                resource = %action.resource,
                api_key = context.api_key,
                resource_ref_count = action.resource_reference_count,
                rule = %rule,
                $verdict
            )
        };
    }
    match (
        authorization.is_allowed(),
        action.log_if_allowed,
        action.log_if_denied,
    ) {
        (true, true, _) => line!(debug, "Allowed"),
        (false, _, true) => line!(info, "Denied"),
        (true, false, _) => line!(trace, "Allowed"),
        (false, _, false) => line!(trace, "Denied"),
    }
}

/// The deciding rule as the audit line shows it (`MatchingAcl(acl=…)`), written straight into
/// the subscriber's output instead of a `String` per decision.
struct RuleDisplay<'a>(&'a DecidingRule);

impl fmt::Display for RuleDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            DecidingRule::SuperUser => f.write_str("SuperUser"),
            DecidingRule::MatchingAcl(binding) => write!(f, "MatchingAcl(acl={binding})"),
            DecidingRule::DefaultAllow => f.write_str("DefaultAllow"),
            _ => f.write_str("DefaultDeny"),
        }
    }
}

fn audit_enabled() -> bool {
    tracing::enabled!(target: AUDIT_TARGET, tracing::Level::INFO)
}

impl Authorizer for AclAuthorizer {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        let mut out = Vec::with_capacity(actions.len());
        self.authorize_each(context, actions, &mut |_, authorization| {
            out.push(authorization)
        });
        out
    }

    /// Allocation-free: one snapshot load and one client lookup for all actions; the deciding
    /// ACL is shared (`Arc`), and the audit line is formatted only when it is logged.
    fn authorize_each(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        let auditing = audit_enabled();
        if self.is_super_user(&context.principal) {
            for (i, action) in actions.iter().enumerate() {
                let authorization = Authorization::allowed(DecidingRule::SuperUser);
                if auditing {
                    audit(context, action, &authorization);
                }
                decided(i, authorization);
            }
            return;
        }
        let index = self.index.load();
        let client = index.client(&context.principal, &context.groups, context.client_address);
        for (i, action) in actions.iter().enumerate() {
            let authorization = self.authorize_one(&index, &client, action);
            if auditing {
                audit(context, action, &authorization);
            }
            decided(i, authorization);
        }
    }

    fn authorize_by_resource_type(
        &self,
        context: &RequestContext<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> Decision {
        // Kafka rejects ANY/UNKNOWN arguments with IllegalArgumentException; deny them here.
        if matches!(resource_type, ResourceType::Any | ResourceType::Unknown)
            || matches!(operation, AclOperation::Any | AclOperation::Unknown)
        {
            return Decision::Denied;
        }
        if self.is_super_user(&context.principal) {
            return Decision::Allowed;
        }
        // Kafka's first step: an ordinary authorize() on the resource name "hardcode", so that
        // wildcard ACLs decide. One snapshot and one client lookup serve both steps, and nothing
        // is allocated.
        let index = self.index.load();
        let client = index.client(&context.principal, &context.groups, context.client_address);
        if self.decide_on(&index, &client, operation, resource_type, HARDCODE_RESOURCE)
            == Decision::Allowed
        {
            return Decision::Allowed;
        }
        if index.allows_some(&client, operation, resource_type) {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }

    fn acl_admin(&self) -> Option<&dyn AclAdmin> {
        Some(self)
    }
}

impl AclAuthorizer {
    /// Applies records this authorizer just appended. With the node's store the subscription
    /// has already applied them (before `append` returned) and this changes nothing; with a store
    /// that cannot be followed it is what makes them visible.
    fn applied(&self, records: &[MetadataRecord]) {
        apply_acl_records(&self.index, &self.events, &self.applier, records.iter());
    }
}

/// The metadata records that store ACL changes.
fn records_of(changes: Vec<AclChange>) -> Vec<MetadataRecord> {
    changes.into_iter().map(MetadataRecord::from).collect()
}

impl AclAdmin for AclAuthorizer {
    fn create_acls(&self, bindings: &[AclBinding]) -> Vec<Result<(), AclAdminError>> {
        let _writer = self.lock_writer();
        let Some(prepared) = self.prepare_create_acls(bindings) else {
            return Vec::new();
        };
        if prepared.changes.is_empty() {
            return prepared.outcome;
        }
        let records = records_of(prepared.changes);
        if let Err(error) = self.store.append(&records) {
            tracing::error!(%error, "storing ACLs failed");
            let message = error.to_string();
            return prepared
                .outcome
                .into_iter()
                .map(|r| r.and(Err(AclAdminError::Store(message.clone()))))
                .collect();
        }
        self.applied(&records);
        prepared.outcome
    }

    fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>, AclAdminError> {
        let _writer = self.lock_writer();
        let Some(prepared) = self.prepare_delete_acls(filters) else {
            return Ok(Vec::new());
        };
        if prepared.changes.is_empty() {
            return Ok(prepared.outcome);
        }
        // One append: the removal is atomic across all filters.
        let records = records_of(prepared.changes);
        self.store
            .append(&records)
            .map_err(|e| AclAdminError::Store(e.to_string()))?;
        self.applied(&records);
        Ok(prepared.outcome)
    }

    fn prepare_create_acls(
        &self,
        bindings: &[AclBinding],
    ) -> Option<PreparedAclChange<Vec<Result<(), AclAdminError>>>> {
        let current = self.index.load_full();
        let mut results = Vec::with_capacity(bindings.len());
        let mut new: BTreeSet<AclBinding> = BTreeSet::new();
        for binding in bindings {
            match validate_for_create(binding) {
                Err(invalid) => results.push(Err(AclAdminError::Invalid(invalid))),
                Ok(()) => {
                    // Duplicates are accepted silently and not stored twice.
                    if !current.contains(binding) {
                        new.insert(binding.clone());
                    }
                    results.push(Ok(()));
                }
            }
        }
        let changes = new.into_iter().map(AclChange::Create).collect();
        Some(PreparedAclChange {
            changes,
            outcome: results,
        })
    }

    fn prepare_delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Option<PreparedAclChange<Vec<Vec<AclBinding>>>> {
        let current = self.index.load_full();
        let per_filter: Vec<Vec<AclBinding>> =
            filters.iter().map(|f| current.matching(f)).collect();
        let doomed: BTreeSet<&AclBinding> = per_filter.iter().flatten().collect();
        let changes = doomed
            .into_iter()
            .map(|binding| AclChange::Delete(binding.clone()))
            .collect();
        Some(PreparedAclChange {
            changes,
            outcome: per_filter,
        })
    }

    fn describe_acls(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.index.load().matching(filter)
    }
}
