//! Helpers shared by the integration tests: a real FileMetadataStore in a temp dir.
#![allow(
    clippy::unwrap_used,
    reason = "shared by integration tests, which report a failure by panicking"
)]
#![allow(dead_code)]

use std::net::IpAddr;
use std::sync::Arc;

use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use portcullis::authorizer::{AclAdmin, Action, Authorization, Authorizer, RequestContext};
use portcullis::principal::Principal;
use portcullis_plugin_acl::{AclAuthorizer, AclAuthorizerConfig};
use portcullis_plugin_stores::FileMetadataStore;

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub authorizer: AclAuthorizer,
}

pub fn fixture(super_users: &[&str], allow_everyone: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileMetadataStore::open(dir.path()).unwrap());
    let config = AclAuthorizerConfig::new(
        super_users.iter().map(|s| s.to_string()).collect(),
        allow_everyone,
    );
    let authorizer = AclAuthorizer::open(&config, store).unwrap();
    Fixture { dir, authorizer }
}

pub fn acl(
    rt: ResourceType,
    pt: PatternType,
    name: &str,
    principal: &str,
    host: &str,
    op: AclOperation,
    perm: PermissionType,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern::new(rt, name, pt),
        entry: AccessControlEntry {
            principal: principal.into(),
            host: host.into(),
            operation: op,
            permission: perm,
        },
    }
}

pub fn allow(
    rt: ResourceType,
    pt: PatternType,
    name: &str,
    principal: &str,
    op: AclOperation,
) -> AclBinding {
    acl(rt, pt, name, principal, "*", op, PermissionType::Allow)
}

pub fn deny(
    rt: ResourceType,
    pt: PatternType,
    name: &str,
    principal: &str,
    op: AclOperation,
) -> AclBinding {
    acl(rt, pt, name, principal, "*", op, PermissionType::Deny)
}

pub fn ctx(principal: &str, host: &str) -> RequestContext<'static> {
    RequestContext::new(
        Principal::parse(principal).unwrap(),
        host.parse::<IpAddr>().unwrap(),
        "PLAIN",
        0,
        0,
        1,
    )
}

/// A context whose session has these group principals (`Group:readers`, ...), as a bearer
/// token's groups claim gives them.
pub fn ctx_with_groups(principal: &str, groups: &[&str], host: &str) -> RequestContext<'static> {
    let groups: Vec<Principal> = groups
        .iter()
        .map(|g| Principal::parse(g).unwrap())
        .collect();
    ctx(principal, host).with_groups(groups)
}

impl Fixture {
    pub fn add(&self, bindings: &[AclBinding]) {
        for r in self.authorizer.create_acls(bindings) {
            r.unwrap();
        }
    }

    pub fn check(
        &self,
        principal: &str,
        host: &str,
        op: AclOperation,
        rt: ResourceType,
        name: &str,
    ) -> Authorization {
        self.check_with_groups(principal, &[], host, op, rt, name)
    }

    /// [`Fixture::check`] for a session with group principals.
    pub fn check_with_groups(
        &self,
        principal: &str,
        groups: &[&str],
        host: &str,
        op: AclOperation,
        rt: ResourceType,
        name: &str,
    ) -> Authorization {
        let context = ctx_with_groups(principal, groups, host);
        let action = Action::new(op, rt, name);
        let mut out = self
            .authorizer
            .authorize(&context, std::slice::from_ref(&action));
        assert_eq!(out.len(), 1);
        let authorization = out.remove(0);
        // The allocation-free path must agree.
        assert_eq!(
            self.authorizer.decide(&context, &action),
            authorization.decision
        );
        authorization
    }

    pub fn allowed(
        &self,
        principal: &str,
        host: &str,
        op: AclOperation,
        rt: ResourceType,
        name: &str,
    ) -> bool {
        self.check(principal, host, op, rt, name).decision
            == portcullis::authorizer::Decision::Allowed
    }

    /// Whether a session from 127.0.0.1 with these groups may perform `op` on topic `name`.
    pub fn allowed_with_groups(
        &self,
        principal: &str,
        groups: &[&str],
        op: AclOperation,
        name: &str,
    ) -> bool {
        self.check_with_groups(
            principal,
            groups,
            "127.0.0.1",
            op,
            ResourceType::Topic,
            name,
        )
        .decision
            == portcullis::authorizer::Decision::Allowed
    }
}
