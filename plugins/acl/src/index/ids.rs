//! The interned ids the index searches by: principal and host strings of stored ACLs turned
//! into integers, the wildcard ids, and the search key and operation masks built from them.

use std::net::IpAddr;
use std::sync::Arc;

use foldhash::{HashMap, HashSet};
use portcullis::acl::{AclOperation, PermissionType};

use crate::host::HostMatch;

/// Principal id of `User:*`.
pub(super) const WILDCARD_PRINCIPAL_ID: u32 = 0;
/// Host id of `*`.
pub(super) const WILDCARD_HOST_ID: u32 = 0;
/// Host id of hosts that match no client (they sort after every real key).
pub(super) const NEVER_HOST_ID: u32 = u32::MAX;

/// The bit of an operation in the operation masks.
pub(super) fn bit(op: AclOperation) -> u32 {
    1u32 << (u32::from(op.code().unsigned_abs()) & 31)
}

/// The actions an ACL applies to (§6.2 step 6): ALL applies to everything; an ALLOW on READ,
/// WRITE, DELETE or ALTER also applies to DESCRIBE, an ALLOW on ALTER_CONFIGS also to
/// DESCRIBE_CONFIGS; a DENY implies nothing.
pub(super) fn applies_to(op: AclOperation, permission: PermissionType) -> u32 {
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

pub(super) fn key(principal: u32, host: u32) -> u64 {
    (u64::from(principal) << 32) | u64::from(host)
}

/// Principal strings `type:name` interned to ids. Keyed by name, then type, so a lookup with a
/// [`Principal`] needs no allocation; equality is Kafka's (type and name, split at the first `:`).
#[derive(Clone, Debug, Default)]
pub(super) struct Principals {
    by_name: HashMap<Arc<str>, Vec<(Arc<str>, u32)>>,
    next: u32,
    /// Principal and host strings of stored ACLs, shared so that a million ACLs of one
    /// principal hold one copy of its name.
    strings: HashSet<Arc<str>>,
}

impl Principals {
    pub(super) fn shared(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(text) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(text);
        self.strings.insert(Arc::clone(&shared));
        shared
    }

    pub(super) fn get(&self, kind: &str, name: &str) -> Option<u32> {
        self.by_name
            .get(name)?
            .iter()
            .find(|(k, _)| **k == *kind)
            .map(|(_, id)| *id)
    }

    pub(super) fn intern(&mut self, kind: &str, name: &str) -> u32 {
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
pub(super) struct Hosts {
    pub(super) by_address: HashMap<IpAddr, u32>,
}

impl Hosts {
    pub(super) fn intern(&mut self, host: &str) -> u32 {
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
