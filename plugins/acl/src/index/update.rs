//! Changing the ACL set: [`Index::apply`] groups the additions and removals per resource
//! pattern, rebuilds each touched pattern's [`ResourceAcls`] and applies the bucket changes.

use std::collections::HashMap as StdHashMap;
use std::sync::Arc;

use foldhash::HashSet;
use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    WILDCARD_RESOURCE,
};

use super::buckets::BucketChanges;
use super::ids::{applies_to, key, Hosts, Principals, NEVER_HOST_ID};
use super::resource::{ResourceAcls, Slot, StoredAcl};
use super::snapshot::{Index, TypeIndex};

/// A change to the ACL set, grouped per resource pattern.
#[derive(Default)]
struct PatternChange {
    add: Vec<AccessControlEntry>,
    remove: Vec<AccessControlEntry>,
}

impl Index {
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

fn prefix_lengths(lengths: impl Iterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut counts: std::collections::BTreeMap<usize, usize> = std::collections::BTreeMap::new();
    for len in lengths {
        *counts.entry(len).or_default() += 1;
    }
    counts.into_iter().collect()
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
