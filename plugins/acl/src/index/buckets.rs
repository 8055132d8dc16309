//! The buckets that answer `authorize_by_resource_type`: per (principal, host, operation), the
//! names its ACLs allow or deny, and the form in which a batch of ACL changes reaches them.

use std::collections::HashMap as StdHashMap;
use std::sync::Arc;

use foldhash::HashSet;
use portcullis::acl::{AclOperation, PatternType, PermissionType};

/// Names allowed or denied to one (principal, host, operation), for `authorize_by_resource_type`.
#[derive(Clone, Debug, Default)]
pub(super) struct Bucket {
    pub(super) wildcard_allow: bool,
    pub(super) wildcard_deny: bool,
    /// Sorted, so the names under a denied prefix are one run that can be skipped at once.
    pub(super) allow_literal: Vec<Arc<str>>,
    pub(super) allow_prefixed: Vec<Arc<str>>,
    pub(super) deny_literal: HashSet<Arc<str>>,
    pub(super) deny_prefixed: HashSet<Arc<str>>,
    pub(super) deny_prefix_lengths: Vec<usize>,
}

impl Bucket {
    pub(super) fn is_empty(&self) -> bool {
        !self.wildcard_allow
            && !self.wildcard_deny
            && self.allow_literal.is_empty()
            && self.allow_prefixed.is_empty()
            && self.deny_literal.is_empty()
            && self.deny_prefixed.is_empty()
    }

    /// A denied prefix that `name` starts with, if any.
    pub(super) fn denied_prefix_of<'a>(&self, name: &'a str) -> Option<&'a str> {
        self.deny_prefix_lengths
            .iter()
            .take_while(|len| **len <= name.len())
            .filter_map(|len| name.get(..*len))
            .find(|prefix| self.deny_prefixed.contains(*prefix))
    }
}

pub(super) type BucketKey = (u32, u32, AclOperation);

/// Per bucket: (added?, pattern type, permission, name).
pub(super) type BucketChanges =
    StdHashMap<BucketKey, Vec<(bool, PatternType, PermissionType, Arc<str>)>>;
