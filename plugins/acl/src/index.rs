//! The ACL index: an immutable snapshot built for `authorize()` and `authorize_by_resource_type()`.
//!
//! Layout, per resource type (each an `Arc`, so a change copies only the type it touches):
//! - `literal` / `prefixed`: name → the ACLs of that resource pattern ([`ResourceAcls`]).
//!   A PREFIXED lookup probes the name's prefixes of the byte lengths that some PREFIXED
//!   pattern of this type has (`prefix_lengths`), so it costs one hash probe per distinct
//!   prefix length not longer than the name, whatever the number of ACLs.
//! - `wildcard`: the LITERAL `*` pattern.
//! - `buckets`: for `authorize_by_resource_type`, the names an ACL allows or denies, keyed by
//!   (principal, host, operation) exactly as Kafka's default algorithm filters them.
//!
//! Inside a [`ResourceAcls`], entries are sorted by a key (principal id, host id), where ids
//! come from tables interned at index time (`User:*` is principal 0, `*` is host 0). A lookup
//! is then at most four binary searches over integers (two more per group of the session that
//! some ACL names), and an operation bitmask rejects a resource without looking at any entry.
//! Nothing on the read path allocates (up to six ACL-named groups per session).

use std::collections::HashMap as StdHashMap;
use std::net::IpAddr;
use std::sync::Arc;

use foldhash::{HashMap, HashSet};
use portcullis::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType,
    ResourcePattern, ResourceType, WILDCARD_RESOURCE,
};
use portcullis::principal::{Principal, USER_TYPE};
use smallvec::SmallVec;

use crate::host::{normalize, HostMatch};

/// Principal id of `User:*`.
const WILDCARD_PRINCIPAL_ID: u32 = 0;
/// Host id of `*`.
const WILDCARD_HOST_ID: u32 = 0;
/// Host id of hosts that match no client (they sort after every real key).
const NEVER_HOST_ID: u32 = u32::MAX;
/// Slots in [`Index::types`]: one per `ResourceType` wire code (0..=7).
const TYPE_SLOTS: usize = 8;

/// The bit of an operation in the operation masks.
fn bit(op: AclOperation) -> u32 {
    1u32 << (u32::from(op.code().unsigned_abs()) & 31)
}

/// The actions an ACL applies to (§6.2 step 6): ALL applies to everything; an ALLOW on READ,
/// WRITE, DELETE or ALTER also applies to DESCRIBE, an ALLOW on ALTER_CONFIGS also to
/// DESCRIBE_CONFIGS; a DENY implies nothing.
fn applies_to(op: AclOperation, permission: PermissionType) -> u32 {
    if op == AclOperation::All {
        return u32::MAX;
    }
    if permission == PermissionType::Allow {
        match op {
            AclOperation::Read
            | AclOperation::Write
            | AclOperation::Delete
            | AclOperation::Alter => bit(op) | bit(AclOperation::Describe),
            AclOperation::AlterConfigs => bit(op) | bit(AclOperation::DescribeConfigs),
            _ => bit(op),
        }
    } else {
        bit(op)
    }
}

fn key(principal: u32, host: u32) -> u64 {
    (u64::from(principal) << 32) | u64::from(host)
}

/// One stored ACL of a resource pattern.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct StoredAcl {
    principal: Arc<str>,
    host: Arc<str>,
    operation: AclOperation,
    permission: PermissionType,
    /// The whole binding, shared: an `authorize()` decided by this ACL hands it out as its
    /// deciding rule without allocating.
    binding: Arc<AclBinding>,
}

impl StoredAcl {
    fn entry(&self) -> AccessControlEntry {
        AccessControlEntry {
            principal: self.principal.to_string(),
            host: self.host.to_string(),
            operation: self.operation,
            permission: self.permission,
        }
    }

    fn is(&self, entry: &AccessControlEntry) -> bool {
        *self.principal == *entry.principal
            && *self.host == *entry.host
            && self.operation == entry.operation
            && self.permission == entry.permission
    }
}

/// The search part of a stored ACL.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: u64,
    applies_to: u32,
    deny: bool,
}

/// Every ACL of one resource pattern.
#[derive(Debug)]
pub(crate) struct ResourceAcls {
    resource_type: ResourceType,
    pattern_type: PatternType,
    name: Arc<str>,
    /// Parallel to `slots`, sorted by slot key.
    acls: Box<[StoredAcl]>,
    slots: Box<[Slot]>,
    /// OR of `applies_to` of every slot that can match some client.
    applies_to: u32,
}

impl ResourceAcls {
    fn pattern(&self) -> ResourcePattern {
        ResourcePattern::new(self.resource_type, &*self.name, self.pattern_type)
    }

    /// The binding of the ACL at `index` (a position returned by a lookup).
    pub(crate) fn binding(&self, index: usize) -> Option<Arc<AclBinding>> {
        self.acls.get(index).map(|acl| Arc::clone(&acl.binding))
    }

    fn bindings(&self) -> impl Iterator<Item = AclBinding> + '_ {
        self.acls.iter().map(|acl| AclBinding {
            pattern: self.pattern(),
            entry: acl.entry(),
        })
    }

    /// The first matching DENY, else the first matching ALLOW, among the client's keys: the
    /// user's and `User:*`'s (Kafka's), then its groups'.
    fn find(&self, client: &Client, action: u32) -> Found {
        if self.applies_to & action == 0 {
            return Found::Nothing;
        }
        let mut allow = None;
        for &wanted in client.keys() {
            if let Some(deny) = self.scan(wanted, action, &mut allow) {
                return Found::Deny(deny);
            }
        }
        if !client.groups.is_empty() {
            for wanted in client.group_keys() {
                if let Some(deny) = self.scan(wanted, action, &mut allow) {
                    return Found::Deny(deny);
                }
            }
        }
        allow.map_or(Found::Nothing, Found::Allow)
    }

    /// The slots of one key: the position of a matching DENY, if any; the first matching ALLOW
    /// goes to `allow` unless it holds one already.
    #[inline]
    fn scan(&self, wanted: u64, action: u32, allow: &mut Option<usize>) -> Option<usize> {
        let start = self.slots.partition_point(|s| s.key < wanted);
        let run = self.slots.get(start..)?;
        for (offset, slot) in run.iter().take_while(|s| s.key == wanted).enumerate() {
            if slot.applies_to & action != 0 {
                if slot.deny {
                    return Some(start + offset);
                }
                allow.get_or_insert(start + offset);
            }
        }
        None
    }
}

enum Found {
    Nothing,
    Allow(usize),
    Deny(usize),
}

/// What the ACLs say about one action (before super users and the no-ACL default).
pub(crate) enum Outcome<'a> {
    /// A matching DENY.
    Deny(&'a ResourceAcls, usize),
    /// No matching DENY and this matching ALLOW.
    Allow(&'a ResourceAcls, usize),
    /// Some ACL applies to the resource, none matches.
    NoMatch,
    /// No ACL applies to the resource at all.
    NoAcls,
}

/// Group ids a client holds inline (groups that some ACL names; others take no slot).
const INLINE_GROUPS: usize = 6;

/// The ids of a client, resolved once per request.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    /// Kafka's search keys, most specific first: the user with the client's host and with `*`,
    /// then `User:*` with both; `len` of them are valid.
    keys: [u64; 4],
    len: usize,
    /// The user principal's id, when some ACL names it.
    principal: Option<u32>,
    host: Option<u32>,
    /// The ids of the session's group principals that some ACL names, each once, in the
    /// session's order (never the user's or `User:*`'s id).
    groups: SmallVec<[u32; INLINE_GROUPS]>,
}

impl Client {
    fn keys(&self) -> &[u64] {
        self.keys.get(..self.len).unwrap_or(&[])
    }

    /// The groups' search keys: each group with the client's host, then with `*`.
    fn group_keys(&self) -> impl Iterator<Item = u64> + '_ {
        let host = self.host;
        self.groups.iter().flat_map(move |g| {
            host.into_iter()
                .chain(std::iter::once(WILDCARD_HOST_ID))
                .map(move |h| key(*g, h))
        })
    }

    /// Every principal id whose ACLs apply: the user's, `User:*`, the groups'.
    fn principal_ids(&self) -> impl Iterator<Item = u32> + '_ {
        let user = self.principal.filter(|p| *p != WILDCARD_PRINCIPAL_ID);
        user.into_iter()
            .chain(std::iter::once(WILDCARD_PRINCIPAL_ID))
            .chain(self.groups.iter().copied())
    }
}

/// Principal strings `type:name` interned to ids. Keyed by name, then type, so a lookup with a
/// [`Principal`] needs no allocation; equality is Kafka's (type and name, split at the first `:`).
#[derive(Clone, Debug, Default)]
struct Principals {
    by_name: HashMap<Arc<str>, Vec<(Arc<str>, u32)>>,
    next: u32,
    /// Principal and host strings of stored ACLs, shared so that a million ACLs of one
    /// principal hold one copy of its name.
    strings: HashSet<Arc<str>>,
}

impl Principals {
    fn shared(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(text) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(text);
        self.strings.insert(Arc::clone(&shared));
        shared
    }

    fn get(&self, kind: &str, name: &str) -> Option<u32> {
        self.by_name
            .get(name)?
            .iter()
            .find(|(k, _)| **k == *kind)
            .map(|(_, id)| *id)
    }

    fn intern(&mut self, kind: &str, name: &str) -> u32 {
        if let Some(id) = self.get(kind, name) {
            return id;
        }
        let id = self.next;
        self.next += 1;
        self.by_name
            .entry(Arc::from(name))
            .or_default()
            .push((Arc::from(kind), id));
        id
    }
}

/// Client addresses that some ACL names, interned to ids (0 is `*`).
#[derive(Clone, Debug, Default)]
struct Hosts {
    by_address: HashMap<IpAddr, u32>,
}

impl Hosts {
    fn intern(&mut self, host: &str) -> u32 {
        match HostMatch::of(host) {
            HostMatch::Any => WILDCARD_HOST_ID,
            HostMatch::Never => NEVER_HOST_ID,
            HostMatch::Exact(ip) => {
                let next = u32::try_from(self.by_address.len() + 1).unwrap_or(NEVER_HOST_ID - 1);
                *self.by_address.entry(ip).or_insert(next)
            }
        }
    }
}

/// Names allowed or denied to one (principal, host, operation), for `authorize_by_resource_type`.
#[derive(Clone, Debug, Default)]
struct Bucket {
    wildcard_allow: bool,
    wildcard_deny: bool,
    /// Sorted, so the names under a denied prefix are one run that can be skipped at once.
    allow_literal: Vec<Arc<str>>,
    allow_prefixed: Vec<Arc<str>>,
    deny_literal: HashSet<Arc<str>>,
    deny_prefixed: HashSet<Arc<str>>,
    deny_prefix_lengths: Vec<usize>,
}

impl Bucket {
    fn is_empty(&self) -> bool {
        !self.wildcard_allow
            && !self.wildcard_deny
            && self.allow_literal.is_empty()
            && self.allow_prefixed.is_empty()
            && self.deny_literal.is_empty()
            && self.deny_prefixed.is_empty()
    }

    /// A denied prefix that `name` starts with, if any.
    fn denied_prefix_of<'a>(&self, name: &'a str) -> Option<&'a str> {
        self.deny_prefix_lengths
            .iter()
            .take_while(|len| **len <= name.len())
            .filter_map(|len| name.get(..*len))
            .find(|prefix| self.deny_prefixed.contains(*prefix))
    }
}

type BucketKey = (u32, u32, AclOperation);

/// One resource type's part of the index.
#[derive(Clone, Debug, Default)]
struct TypeIndex {
    literal: HashMap<Arc<str>, Arc<ResourceAcls>>,
    prefixed: HashMap<Arc<str>, Arc<ResourceAcls>>,
    /// Distinct byte lengths of the PREFIXED names, ascending, with how many names have each.
    prefix_lengths: Vec<(usize, usize)>,
    wildcard: Option<Arc<ResourceAcls>>,
    buckets: HashMap<BucketKey, Arc<Bucket>>,
}

impl TypeIndex {
    fn map(&self, pattern_type: PatternType) -> Option<&HashMap<Arc<str>, Arc<ResourceAcls>>> {
        match pattern_type {
            PatternType::Literal => Some(&self.literal),
            PatternType::Prefixed => Some(&self.prefixed),
            _ => None,
        }
    }

    /// Every PREFIXED pattern whose name is a prefix of `name`.
    fn prefixes_of<'s, 'n>(
        &'s self,
        name: &'n str,
    ) -> impl Iterator<Item = &'s Arc<ResourceAcls>> + use<'s, 'n> {
        self.prefix_lengths
            .iter()
            .take_while(move |(len, _)| *len <= name.len())
            .filter_map(move |(len, _)| self.prefixed.get(name.get(..*len)?))
    }
}

/// A change to the ACL set, grouped per resource pattern.
#[derive(Default)]
struct PatternChange {
    add: Vec<AccessControlEntry>,
    remove: Vec<AccessControlEntry>,
}

/// Per bucket: (added?, pattern type, permission, name).
type BucketChanges = StdHashMap<BucketKey, Vec<(bool, PatternType, PermissionType, Arc<str>)>>;

/// The immutable ACL snapshot readers use.
#[derive(Clone, Debug)]
pub(crate) struct Index {
    principals: Arc<Principals>,
    hosts: Arc<Hosts>,
    types: [Arc<TypeIndex>; TYPE_SLOTS],
    acl_count: usize,
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

    fn type_index(&self, resource_type: ResourceType) -> Option<&TypeIndex> {
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

    /// Adds and removes ACLs (all valid); returns the ones that were actually added (not
    /// already present) and removed (present). Removals apply before additions.
    pub(crate) fn apply(
        &mut self,
        add: impl IntoIterator<Item = AclBinding>,
        remove: Vec<AclBinding>,
    ) -> (Vec<AclBinding>, Vec<AclBinding>) {
        let mut changes: StdHashMap<ResourcePattern, PatternChange> = StdHashMap::new();
        for binding in remove {
            changes
                .entry(binding.pattern)
                .or_default()
                .remove
                .push(binding.entry);
        }
        for binding in add {
            changes
                .entry(binding.pattern)
                .or_default()
                .add
                .push(binding.entry);
        }
        let mut added = Vec::new();
        let mut removed = Vec::new();
        let mut by_type: StdHashMap<usize, Vec<(ResourcePattern, PatternChange)>> =
            StdHashMap::new();
        for (pattern, change) in changes {
            let slot = usize::from(pattern.resource_type.code().unsigned_abs());
            by_type.entry(slot).or_default().push((pattern, change));
        }
        for (slot, changes) in by_type {
            let Some(type_arc) = self.types.get_mut(slot) else {
                continue;
            };
            let principals = Arc::make_mut(&mut self.principals);
            let hosts = Arc::make_mut(&mut self.hosts);
            let index = Arc::make_mut(type_arc);
            let mut bucket_changes: BucketChanges = StdHashMap::new();
            for (pattern, change) in changes {
                apply_pattern(
                    index,
                    principals,
                    hosts,
                    pattern,
                    change,
                    &mut bucket_changes,
                    &mut added,
                    &mut removed,
                );
            }
            apply_buckets(index, bucket_changes);
            index.prefix_lengths = prefix_lengths(index.prefixed.keys().map(|k| k.len()));
        }
        self.acl_count = (self.acl_count + added.len()).saturating_sub(removed.len());
        (added, removed)
    }
}

/// Applies one pattern's change and rebuilds its [`ResourceAcls`].
#[allow(clippy::too_many_arguments)]
fn apply_pattern(
    index: &mut TypeIndex,
    principals: &mut Principals,
    hosts: &mut Hosts,
    pattern: ResourcePattern,
    change: PatternChange,
    bucket_changes: &mut BucketChanges,
    added: &mut Vec<AclBinding>,
    removed: &mut Vec<AclBinding>,
) {
    let Some(map) = (match pattern.pattern_type {
        PatternType::Literal => Some(&mut index.literal),
        PatternType::Prefixed => Some(&mut index.prefixed),
        _ => None,
    }) else {
        return;
    };
    let existing = map.get(pattern.name.as_str());
    let name: Arc<str> =
        existing.map_or_else(|| Arc::from(pattern.name.as_str()), |r| Arc::clone(&r.name));
    let mut acls: Vec<StoredAcl> = existing.map(|r| r.acls.to_vec()).unwrap_or_default();
    let mut note =
        |added_flag: bool, acl: &StoredAcl, principals: &mut Principals, hosts: &mut Hosts| {
            let Some((kind, pname)) = acl.principal.split_once(':') else {
                return;
            };
            let host = hosts.intern(&acl.host);
            if host == NEVER_HOST_ID {
                return;
            }
            let principal = principals.intern(kind, pname);
            bucket_changes
                .entry((principal, host, acl.operation))
                .or_default()
                .push((
                    added_flag,
                    pattern.pattern_type,
                    acl.permission,
                    Arc::clone(&name),
                ));
        };
    for entry in change.remove {
        if let Some(pos) = acls.iter().position(|a| a.is(&entry)) {
            let acl = acls.swap_remove(pos);
            note(false, &acl, principals, hosts);
            removed.push(AclBinding {
                pattern: pattern.clone(),
                entry,
            });
        }
    }
    let mut seen: HashSet<AccessControlEntry> = HashSet::default();
    let present: HashSet<(Arc<str>, Arc<str>, AclOperation, PermissionType)> = acls
        .iter()
        .map(|a| {
            (
                Arc::clone(&a.principal),
                Arc::clone(&a.host),
                a.operation,
                a.permission,
            )
        })
        .collect();
    for entry in change.add {
        let identity = (
            principals.shared(&entry.principal),
            principals.shared(&entry.host),
            entry.operation,
            entry.permission,
        );
        if present.contains(&identity) || !seen.insert(entry.clone()) {
            continue;
        }
        let acl = StoredAcl {
            principal: identity.0,
            host: identity.1,
            operation: entry.operation,
            permission: entry.permission,
            binding: Arc::new(AclBinding {
                pattern: pattern.clone(),
                entry: entry.clone(),
            }),
        };
        note(true, &acl, principals, hosts);
        acls.push(acl);
        added.push(AclBinding {
            pattern: pattern.clone(),
            entry,
        });
    }
    let is_wildcard =
        pattern.pattern_type == PatternType::Literal && pattern.name == WILDCARD_RESOURCE;
    if acls.is_empty() {
        map.remove(pattern.name.as_str());
        if is_wildcard {
            index.wildcard = None;
        }
        return;
    }
    let rebuilt = Arc::new(resource_acls(&pattern, name, acls, principals, hosts));
    if is_wildcard {
        index.wildcard = Some(Arc::clone(&rebuilt));
    }
    map.insert(Arc::clone(&rebuilt.name), rebuilt);
}

/// Sorts a pattern's ACLs by search key and computes the slots.
fn resource_acls(
    pattern: &ResourcePattern,
    name: Arc<str>,
    acls: Vec<StoredAcl>,
    principals: &mut Principals,
    hosts: &mut Hosts,
) -> ResourceAcls {
    let mut keyed: Vec<(Slot, StoredAcl)> = acls
        .into_iter()
        .map(|acl| {
            let host = hosts.intern(&acl.host);
            let principal = acl
                .principal
                .split_once(':')
                .map_or(u32::MAX, |(kind, name)| principals.intern(kind, name));
            let slot = Slot {
                key: key(principal, host),
                applies_to: applies_to(acl.operation, acl.permission),
                deny: acl.permission == PermissionType::Deny,
            };
            (slot, acl)
        })
        .collect();
    keyed.sort_by(|(a, x), (b, y)| a.key.cmp(&b.key).then_with(|| x.cmp(y)));
    let applies = keyed
        .iter()
        .filter(|(s, _)| (s.key & u64::from(u32::MAX)) != u64::from(NEVER_HOST_ID))
        .fold(0, |mask, (s, _)| mask | s.applies_to);
    let (slots, acls): (Vec<Slot>, Vec<StoredAcl>) = keyed.into_iter().unzip();
    ResourceAcls {
        resource_type: pattern.resource_type,
        pattern_type: pattern.pattern_type,
        name,
        acls: acls.into_boxed_slice(),
        slots: slots.into_boxed_slice(),
        applies_to: applies,
    }
}

/// Applies the collected bucket changes: one copy and one sort per touched bucket.
fn apply_buckets(index: &mut TypeIndex, changes: BucketChanges) {
    for (key, changes) in changes {
        let entry = index.buckets.entry(key).or_default();
        let bucket = Arc::make_mut(entry);
        let mut drop_literal: HashSet<Arc<str>> = HashSet::default();
        let mut drop_prefixed: HashSet<Arc<str>> = HashSet::default();
        for (added, pattern_type, permission, name) in changes {
            let wildcard = pattern_type == PatternType::Literal && *name == *WILDCARD_RESOURCE;
            match (permission, pattern_type, wildcard) {
                (PermissionType::Allow, _, true) => bucket.wildcard_allow = added,
                (PermissionType::Deny, _, true) => bucket.wildcard_deny = added,
                // Stored ACLs are ALLOW or DENY (validated on create and on replay).
                (_, _, true) => {}
                (PermissionType::Allow, PatternType::Literal, false) => {
                    if added {
                        drop_literal.remove(&name);
                        bucket.allow_literal.push(name);
                    } else {
                        drop_literal.insert(name);
                    }
                }
                (PermissionType::Allow, _, false) => {
                    if added {
                        drop_prefixed.remove(&name);
                        bucket.allow_prefixed.push(name);
                    } else {
                        drop_prefixed.insert(name);
                    }
                }
                (_, PatternType::Literal, false) => {
                    if added {
                        bucket.deny_literal.insert(name);
                    } else {
                        bucket.deny_literal.remove(&name);
                    }
                }
                (_, _, false) => {
                    if added {
                        bucket.deny_prefixed.insert(name);
                    } else {
                        bucket.deny_prefixed.remove(&name);
                    }
                }
            }
        }
        bucket.allow_literal.retain(|n| !drop_literal.contains(n));
        bucket.allow_prefixed.retain(|n| !drop_prefixed.contains(n));
        bucket.allow_literal.sort();
        bucket.allow_literal.dedup();
        bucket.allow_prefixed.sort();
        bucket.allow_prefixed.dedup();
        let mut lengths: Vec<usize> = bucket.deny_prefixed.iter().map(|n| n.len()).collect();
        lengths.sort_unstable();
        lengths.dedup();
        bucket.deny_prefix_lengths = lengths;
        if bucket.is_empty() {
            index.buckets.remove(&key);
        }
    }
}

fn prefix_lengths(lengths: impl Iterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut counts: std::collections::BTreeMap<usize, usize> = std::collections::BTreeMap::new();
    for len in lengths {
        *counts.entry(len).or_default() += 1;
    }
    counts.into_iter().collect()
}
