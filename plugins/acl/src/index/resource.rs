//! The ACLs of one resource pattern ([`ResourceAcls`], sorted by search key) and the client
//! keys a lookup searches them with ([`Client`]): what one `authorize()` probe reads.

use std::sync::Arc;

use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use smallvec::SmallVec;

use super::ids::{key, WILDCARD_HOST_ID, WILDCARD_PRINCIPAL_ID};

/// One stored ACL of a resource pattern.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct StoredAcl {
    pub(super) principal: Arc<str>,
    pub(super) host: Arc<str>,
    pub(super) operation: AclOperation,
    pub(super) permission: PermissionType,
    /// The whole binding, shared: an `authorize()` decided by this ACL hands it out as its
    /// deciding rule without allocating.
    pub(super) binding: Arc<AclBinding>,
}

impl StoredAcl {
    pub(super) fn entry(&self) -> AccessControlEntry {
        AccessControlEntry {
            principal: self.principal.to_string(),
            host: self.host.to_string(),
            operation: self.operation,
            permission: self.permission,
        }
    }

    pub(super) fn is(&self, entry: &AccessControlEntry) -> bool {
        *self.principal == *entry.principal
            && *self.host == *entry.host
            && self.operation == entry.operation
            && self.permission == entry.permission
    }
}

/// The search part of a stored ACL.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    pub(super) key: u64,
    pub(super) applies_to: u32,
    pub(super) deny: bool,
}

/// Every ACL of one resource pattern.
#[derive(Debug)]
pub(crate) struct ResourceAcls {
    pub(super) resource_type: ResourceType,
    pub(super) pattern_type: PatternType,
    pub(super) name: Arc<str>,
    /// Parallel to `slots`, sorted by slot key.
    pub(super) acls: Box<[StoredAcl]>,
    pub(super) slots: Box<[Slot]>,
    /// OR of `applies_to` of every slot that can match some client.
    pub(super) applies_to: u32,
}

impl ResourceAcls {
    pub(super) fn pattern(&self) -> ResourcePattern {
        ResourcePattern::new(self.resource_type, &*self.name, self.pattern_type)
    }

    /// The binding of the ACL at `index` (a position returned by a lookup).
    pub(crate) fn binding(&self, index: usize) -> Option<Arc<AclBinding>> {
        self.acls.get(index).map(|acl| Arc::clone(&acl.binding))
    }

    pub(super) fn bindings(&self) -> impl Iterator<Item = AclBinding> + '_ {
        self.acls.iter().map(|acl| AclBinding {
            pattern: self.pattern(),
            entry: acl.entry(),
        })
    }

    /// The first matching DENY, else the first matching ALLOW, among the client's keys: the
    /// user's and `User:*`'s (Kafka's), then its groups'.
    pub(super) fn find(&self, client: &Client, action: u32) -> Found {
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

pub(super) enum Found {
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
pub(super) const INLINE_GROUPS: usize = 6;

/// The ids of a client, resolved once per request.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    /// Kafka's search keys, most specific first: the user with the client's host and with `*`,
    /// then `User:*` with both; `len` of them are valid.
    pub(super) keys: [u64; 4],
    pub(super) len: usize,
    /// The user principal's id, when some ACL names it.
    pub(super) principal: Option<u32>,
    pub(super) host: Option<u32>,
    /// The ids of the session's group principals that some ACL names, each once, in the
    /// session's order (never the user's or `User:*`'s id).
    pub(super) groups: SmallVec<[u32; INLINE_GROUPS]>,
}

impl Client {
    pub(super) fn keys(&self) -> &[u64] {
        self.keys.get(..self.len).unwrap_or(&[])
    }

    /// The groups' search keys: each group with the client's host, then with `*`.
    pub(super) fn group_keys(&self) -> impl Iterator<Item = u64> + '_ {
        let host = self.host;
        self.groups.iter().flat_map(move |g| {
            host.into_iter()
                .chain(std::iter::once(WILDCARD_HOST_ID))
                .map(move |h| key(*g, h))
        })
    }

    /// Every principal id whose ACLs apply: the user's, `User:*`, the groups'.
    pub(super) fn principal_ids(&self) -> impl Iterator<Item = u32> + '_ {
        let user = self.principal.filter(|p| *p != WILDCARD_PRINCIPAL_ID);
        user.into_iter()
            .chain(std::iter::once(WILDCARD_PRINCIPAL_ID))
            .chain(self.groups.iter().copied())
    }
}
