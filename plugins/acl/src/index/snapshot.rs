//! The immutable ACL snapshot readers use ([`Index`]) and its read path: resolving a client,
//! `authorize()`'s decision, `authorize_by_resource_type()`, and finding ACLs by filter.

use std::net::IpAddr;
use std::sync::Arc;

use foldhash::HashMap;
use portcullis::acl::{
    AclBinding, AclBindingFilter, AclOperation, PatternType, ResourcePattern, ResourceType,
    WILDCARD_RESOURCE,
};
use portcullis::principal::{Principal, USER_TYPE};
use smallvec::SmallVec;

use super::buckets::{Bucket, BucketKey};
use super::ids::{bit, key, Hosts, Principals, WILDCARD_HOST_ID, WILDCARD_PRINCIPAL_ID};
use super::resource::{Client, Found, Outcome, ResourceAcls, INLINE_GROUPS};
use crate::host::normalize;

/// Slots in [`Index::types`]: one per `ResourceType` wire code (0..=7).
const TYPE_SLOTS: usize = 8;

/// One resource type's part of the index.
#[derive(Clone, Debug, Default)]
pub(super) struct TypeIndex {
    pub(super) literal: HashMap<Arc<str>, Arc<ResourceAcls>>,
    pub(super) prefixed: HashMap<Arc<str>, Arc<ResourceAcls>>,
    /// Distinct byte lengths of the PREFIXED names, ascending, with how many names have each.
    pub(super) prefix_lengths: Vec<(usize, usize)>,
    pub(super) wildcard: Option<Arc<ResourceAcls>>,
    pub(super) buckets: HashMap<BucketKey, Arc<Bucket>>,
}

impl TypeIndex {
    pub(super) fn map(
        &self,
        pattern_type: PatternType,
    ) -> Option<&HashMap<Arc<str>, Arc<ResourceAcls>>> {
        match pattern_type {
            PatternType::Literal => Some(&self.literal),
            PatternType::Prefixed => Some(&self.prefixed),
            _ => None,
        }
    }

    /// Every PREFIXED pattern whose name is a prefix of `name`.
    pub(super) fn prefixes_of<'s, 'n>(
        &'s self,
        name: &'n str,
    ) -> impl Iterator<Item = &'s Arc<ResourceAcls>> + use<'s, 'n> {
        self.prefix_lengths
            .iter()
            .take_while(move |(len, _)| *len <= name.len())
            .filter_map(move |(len, _)| self.prefixed.get(name.get(..*len)?))
    }
}

/// The immutable ACL snapshot readers use.
#[derive(Clone, Debug)]
pub(crate) struct Index {
    pub(super) principals: Arc<Principals>,
    pub(super) hosts: Arc<Hosts>,
    pub(super) types: [Arc<TypeIndex>; TYPE_SLOTS],
    pub(super) acl_count: usize,
}

impl Default for Index {
    fn default() -> Self {
        let mut principals = Principals::default();
        let wildcard = principals.intern(USER_TYPE, "*");
        debug_assert_eq!(wildcard, WILDCARD_PRINCIPAL_ID);
        Self {
            principals: Arc::new(principals),
            hosts: Arc::new(Hosts::default()),
            types: Default::default(),
            acl_count: 0,
        }
    }
}

impl Index {
    /// Builds an index holding `bindings` (already validated).
    pub(crate) fn build(bindings: impl IntoIterator<Item = AclBinding>) -> Self {
        let mut index = Self::default();
        index.apply(bindings, Vec::new());
        index
    }

    /// How many ACLs the index holds.
    pub(crate) fn len(&self) -> usize {
        self.acl_count
    }

    pub(super) fn type_index(&self, resource_type: ResourceType) -> Option<&TypeIndex> {
        self.types
            .get(usize::from(resource_type.code().unsigned_abs()))
            .map(|t| &**t)
    }

    /// Resolves the client's ids once for all its actions: the user principal, its group
    /// principals (a session's groups: their ACLs apply too) and `User:*`. Allocation-free for a
    /// user with up to six groups that ACLs name (groups no ACL names cost a lookup, no slot).
    pub(crate) fn client(
        &self,
        principal: &Principal,
        groups: &[Principal],
        address: IpAddr,
    ) -> Client {
        let principal_id = self.principals.get(&principal.kind, &principal.name);
        let host_id = self.hosts.by_address.get(&normalize(address)).copied();
        let mut keys = [0u64; 4];
        let mut len = 0;
        let principals = [principal_id, Some(WILDCARD_PRINCIPAL_ID)];
        let hosts = [host_id, Some(WILDCARD_HOST_ID)];
        for (i, p) in principals.iter().enumerate() {
            // `User:*` itself asking: its id is already the wildcard's.
            if i == 1 && principal_id == Some(WILDCARD_PRINCIPAL_ID) {
                continue;
            }
            for h in hosts.iter().flatten() {
                if let (Some(p), Some(slot)) = (p, keys.get_mut(len)) {
                    *slot = key(*p, *h);
                    len += 1;
                }
            }
        }
        let mut group_ids: SmallVec<[u32; INLINE_GROUPS]> = SmallVec::new();
        for group in groups {
            // A group listed twice, or one that is the user or `User:*` itself, counts once.
            if let Some(id) = self.principals.get(&group.kind, &group.name) {
                if Some(id) != principal_id
                    && id != WILDCARD_PRINCIPAL_ID
                    && !group_ids.contains(&id)
                {
                    group_ids.push(id);
                }
            }
        }
        Client {
            keys,
            len,
            principal: principal_id,
            host: host_id,
            groups: group_ids,
        }
    }

    /// Kafka's `findAclRule` (§6.2 steps 5–8, without super users and the no-ACL default).
    pub(crate) fn decide(
        &self,
        client: &Client,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> Outcome<'_> {
        let Some(index) = self.type_index(resource_type) else {
            return Outcome::NoAcls;
        };
        let action = bit(operation);
        let mut found_any = false;
        let mut allow: Option<(&ResourceAcls, usize)> = None;
        // Name-specific ACLs first, then the `*` ones: a DENY anywhere wins.
        let literal = index.literal.get(name);
        let candidates = literal
            .into_iter()
            .chain(index.prefixes_of(name))
            .chain(index.wildcard.as_ref());
        for acls in candidates {
            found_any = true;
            match acls.find(client, action) {
                Found::Deny(i) => return Outcome::Deny(acls, i),
                Found::Allow(i) => {
                    allow.get_or_insert((acls, i));
                }
                Found::Nothing => {}
            }
        }
        match allow {
            Some((acls, i)) => Outcome::Allow(acls, i),
            None if found_any => Outcome::NoMatch,
            None => Outcome::NoAcls,
        }
    }

    /// Kafka's default `authorizeByResourceType` after its `hardcode` pre-check (§6.3
    /// [quirk]): ACLs of this type for the principal, its groups or `User:*`, this host or `*`, this
    /// operation or ALL (no implications); a `*` DENY denies, a `*` ALLOW allows; otherwise
    /// allowed if some allowed name is neither denied literally (literal allows only) nor under
    /// a denied prefix.
    pub(crate) fn allows_some(
        &self,
        client: &Client,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        let Some(index) = self.type_index(resource_type) else {
            return false;
        };
        let mut buckets: SmallVec<[&Bucket; 8]> = SmallVec::new();
        let hosts = [client.host, Some(WILDCARD_HOST_ID)];
        let operations = [Some(operation), Some(AclOperation::All)];
        for p in client.principal_ids() {
            for h in hosts.iter().flatten() {
                for (oi, o) in operations.iter().enumerate() {
                    if oi == 1 && operation == AclOperation::All {
                        continue;
                    }
                    let Some(o) = o else { continue };
                    if let Some(bucket) = index.buckets.get(&(p, *h, *o)) {
                        buckets.push(bucket);
                    }
                }
            }
        }
        if buckets.iter().any(|b| b.wildcard_deny) {
            return false;
        }
        if buckets.iter().any(|b| b.wildcard_allow) {
            return true;
        }
        let denied_prefix = |name: &str| -> Option<usize> {
            buckets
                .iter()
                .filter_map(|b| b.denied_prefix_of(name))
                .map(str::len)
                .min()
        };
        let denied_literal = |name: &str| buckets.iter().any(|b| b.deny_literal.contains(name));
        for bucket in &buckets {
            for (names, literal) in [
                (&bucket.allow_literal, true),
                (&bucket.allow_prefixed, false),
            ] {
                let mut i = 0;
                while let Some(name) = names.get(i) {
                    if let Some(len) = denied_prefix(name) {
                        // Every following name under this prefix is dominated too: skip the run.
                        let prefix = name.get(..len).unwrap_or_default();
                        let run = names
                            .get(i..)
                            .map_or(1, |rest| rest.partition_point(|s| s.starts_with(prefix)));
                        i += run.max(1);
                        continue;
                    }
                    if literal && denied_literal(name) {
                        i += 1;
                        continue;
                    }
                    return true;
                }
            }
        }
        false
    }

    /// Whether the index holds exactly this binding.
    pub(crate) fn contains(&self, binding: &AclBinding) -> bool {
        self.resource(&binding.pattern)
            .is_some_and(|acls| acls.acls.iter().any(|acl| acl.is(&binding.entry)))
    }

    fn resource(&self, pattern: &ResourcePattern) -> Option<&Arc<ResourceAcls>> {
        self.type_index(pattern.resource_type)?
            .map(pattern.pattern_type)?
            .get(pattern.name.as_str())
    }

    /// Every ACL matching the filter, sorted. Candidates are narrowed by the index; the
    /// framework's filter has the last word, so this is exactly `filter.matches()`.
    pub(crate) fn matching(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let types: Vec<&TypeIndex> = match filter.pattern.resource_type {
            ResourceType::Any => self.types.iter().map(|t| &**t).collect(),
            other => self.type_index(other).into_iter().collect(),
        };
        let mut out = Vec::new();
        for index in types {
            let mut candidates: Vec<&Arc<ResourceAcls>> = Vec::new();
            let pattern_type = filter.pattern.pattern_type;
            match filter.pattern.name.as_deref() {
                Some(name) => {
                    if matches!(
                        pattern_type,
                        PatternType::Literal | PatternType::Any | PatternType::Match
                    ) {
                        candidates.extend(index.literal.get(name));
                    }
                    if matches!(pattern_type, PatternType::Prefixed | PatternType::Any) {
                        candidates.extend(index.prefixed.get(name));
                    }
                    if pattern_type == PatternType::Match {
                        if name != WILDCARD_RESOURCE {
                            candidates.extend(index.wildcard.as_ref());
                        }
                        candidates.extend(index.prefixes_of(name));
                    }
                }
                None => {
                    if pattern_type != PatternType::Prefixed {
                        candidates.extend(index.literal.values());
                    }
                    if pattern_type != PatternType::Literal {
                        candidates.extend(index.prefixed.values());
                    }
                }
            }
            for acls in candidates {
                out.extend(acls.bindings().filter(|b| filter.matches(b)));
            }
        }
        out.sort();
        out.dedup();
        out
    }
}
