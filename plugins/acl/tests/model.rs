//! Property test: the indexed authorizer against an obviously-correct reference model — a
//! linear scan that is kafka-security-semantics §6.2 written out literally, and Kafka's default
//! `authorizeByResourceType` (§6.3 [quirk]) written out naively.
//!
//! Small alphabets make names, prefixes, principals and hosts collide, so DENY/ALLOW
//! interplay, prefixes of prefixes, `*`, `User:*`/`Group:*` and never-matching hosts all occur.
//!
//! Each ask also carries 0–3 group principals (a bearer token's groups): the model applies §6.2
//! to the set {principal, its groups, `User:*`} — a DENY matching any denies, else an ALLOW
//! matching any allows — and super users to the principal alone. With no groups it is Kafka's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use portcullis::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation as Op, PatternType as Pt,
    PermissionType as Perm, ResourcePattern, ResourceType as Rt,
};
use portcullis::authorizer::{
    AclAdmin, Action, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis::principal::Principal;
use portcullis::store::{MetadataRecord, MetadataStore, Offset, StoreError};
use portcullis_plugin_acl::{java_host_address, AclAuthorizer, AclAuthorizerConfig};
use proptest::prelude::*;

/// A store that keeps records in memory (the durable store has its own tests).
#[derive(Default)]
struct MemoryStore(Mutex<Vec<MetadataRecord>>);

impl MetadataStore for MemoryStore {
    fn append(&self, records: &[MetadataRecord]) -> Result<Offset, StoreError> {
        let mut log = self.0.lock().unwrap();
        let offset = log.len() as Offset;
        log.extend_from_slice(records);
        Ok(offset)
    }
    fn snapshot(&self) -> Result<Vec<MetadataRecord>, StoreError> {
        Ok(self.0.lock().unwrap().clone())
    }
}

const TYPES: &[Rt] = &[Rt::Topic, Rt::Group, Rt::User];
const NAMES: &[&str] = &["a", "ab", "abc", "b", "ba", "*", "é", "éa"];
const QUERY_NAMES: &[&str] = &[
    "a", "ab", "abc", "abcd", "b", "ba", "c", "*", "é", "éa", "hardcode", "hard",
];
const PRINCIPALS: &[&str] = &[
    "User:a", "User:b", "User:*", "Group:a", "Group:*", "User:a:b", "Group:b",
];
/// Groups a session may have: some ACLs name them, `Group:c` none does; `User:b` and the
/// repeated ones test that a group is only ever one more principal to match.
const GROUPS: &[&str] = &["Group:a", "Group:b", "Group:c", "Group:*", "User:b"];
const ASKERS: &[&str] = &[
    "User:a", "User:b", "User:*", "Group:a", "User:c", "User:a:b",
];
const HOSTS: &[&str] = &[
    "*",
    "127.0.0.1",
    "10.0.0.1",
    "0:0:0:0:0:0:0:1",
    "::1",
    "127.0.01",
];
const CLIENTS: &[&str] = &[
    "127.0.0.1",
    "10.0.0.1",
    "::1",
    "10.0.0.2",
    "::ffff:127.0.0.1",
];
const SUPER: &[&str] = &["User:root", "User:a:b"];

fn ops() -> Vec<Op> {
    Op::ALL
        .iter()
        .copied()
        .filter(|o| !matches!(o, Op::Any | Op::Unknown))
        .collect()
}

/// The alphabets one property draws from.
#[derive(Clone, Copy)]
struct Alphabet {
    types: &'static [Rt],
    names: &'static [&'static str],
    query_names: &'static [&'static str],
    principals: &'static [&'static str],
    askers: &'static [&'static str],
    groups: &'static [&'static str],
    hosts: &'static [&'static str],
    clients: &'static [&'static str],
    ops: fn() -> Vec<Op>,
}

/// Wide: every kind of collision can occur.
const WIDE: Alphabet = Alphabet {
    types: TYPES,
    names: NAMES,
    query_names: QUERY_NAMES,
    principals: PRINCIPALS,
    askers: ASKERS,
    groups: GROUPS,
    hosts: HOSTS,
    clients: CLIENTS,
    ops,
};

/// Dense: one type, two principals, few operations, so ALLOW and DENY of the same name for
/// the same client (literal dominance, prefix dominance) happen in most cases.
const DENSE: Alphabet = Alphabet {
    types: &[Rt::Topic],
    names: &["a", "ab", "abc", "b", "*"],
    query_names: &["a", "ab", "abc", "b", "c", "hardcode"],
    principals: &["User:a", "User:*", "Group:g"],
    askers: &["User:a", "User:b"],
    groups: &["Group:g", "Group:h"],
    hosts: &["*", "127.0.0.1"],
    clients: &["127.0.0.1", "10.0.0.1"],
    ops: || vec![Op::Read, Op::Write, Op::All, Op::Describe],
};

fn acl_strategy(alphabet: Alphabet) -> impl Strategy<Value = AclBinding> {
    (
        prop::sample::select(alphabet.types),
        prop::sample::select(&[Pt::Literal, Pt::Prefixed][..]),
        prop::sample::select(alphabet.names),
        prop::sample::select(alphabet.principals),
        prop::sample::select(alphabet.hosts),
        prop::sample::select((alphabet.ops)()),
        prop::sample::select(&[Perm::Allow, Perm::Deny][..]),
    )
        .prop_map(
            |(rt, pt, name, principal, host, operation, permission)| AclBinding {
                pattern: ResourcePattern::new(rt, name, pt),
                entry: AccessControlEntry {
                    principal: principal.into(),
                    host: host.into(),
                    operation,
                    permission,
                },
            },
        )
}

#[derive(Clone, Debug)]
struct Ask {
    principal: &'static str,
    groups: Vec<&'static str>,
    client: &'static str,
    operation: Op,
    resource_type: Rt,
    name: &'static str,
}

fn ask_strategy(alphabet: Alphabet) -> impl Strategy<Value = Ask> {
    (
        prop::sample::select(alphabet.askers),
        prop::collection::vec(prop::sample::select(alphabet.groups), 0..4),
        prop::sample::select(alphabet.clients),
        prop::sample::select((alphabet.ops)()),
        prop::sample::select(alphabet.types),
        prop::sample::select(alphabet.query_names),
    )
        .prop_map(
            |(principal, groups, client, operation, resource_type, name)| Ask {
                principal,
                groups,
                client,
                operation,
                resource_type,
                name,
            },
        )
}

// ---- the reference model -------------------------------------------------------------

struct Model<'a> {
    acls: &'a [AclBinding],
    super_users: &'a [&'a str],
    allow_everyone: bool,
}

fn parse_principal(s: &str) -> (&str, &str) {
    s.split_once(':').unwrap()
}

impl Model<'_> {
    /// The ACL names the principal, one of its groups, or `User:*`.
    fn principal_matches(acl: &AclBinding, who: &Principal, groups: &[Principal]) -> bool {
        let named = parse_principal(&acl.entry.principal);
        std::iter::once(who)
            .chain(groups)
            .any(|p| named == (p.kind.as_str(), p.name.as_str()))
            || acl.entry.principal == "User:*"
    }

    fn host_matches(acl: &AclBinding, client: IpAddr) -> bool {
        acl.entry.host == "*" || acl.entry.host == java_host_address(client)
    }

    fn applies(acl: &AclBinding, rt: Rt, name: &str) -> bool {
        acl.pattern.resource_type == rt
            && match acl.pattern.pattern_type {
                Pt::Literal => acl.pattern.name == name || acl.pattern.name == "*",
                Pt::Prefixed => name.starts_with(acl.pattern.name.as_str()),
                _ => false,
            }
    }

    fn op_matches(acl: &AclBinding, op: Op) -> bool {
        let a = acl.entry.operation;
        if a == Op::All || a == op {
            return true;
        }
        acl.entry.permission == Perm::Allow
            && ((op == Op::Describe && matches!(a, Op::Read | Op::Write | Op::Delete | Op::Alter))
                || (op == Op::DescribeConfigs && a == Op::AlterConfigs))
    }

    #[allow(clippy::too_many_arguments)]
    fn matching<'m>(
        &'m self,
        who: &'m Principal,
        groups: &'m [Principal],
        client: IpAddr,
        op: Op,
        rt: Rt,
        name: &'m str,
    ) -> impl Iterator<Item = &'m AclBinding> + 'm {
        self.acls.iter().filter(move |a| {
            Self::applies(a, rt, name)
                && Self::principal_matches(a, who, groups)
                && Self::host_matches(a, client)
                && Self::op_matches(a, op)
        })
    }

    // One branch per step of §6.2 step 8, even where two steps give the same answer.
    #[allow(clippy::if_same_then_else)]
    fn authorize(
        &self,
        who: &Principal,
        groups: &[Principal],
        client: IpAddr,
        op: Op,
        rt: Rt,
        name: &str,
    ) -> Decision {
        // Super users: the principal alone, never a group.
        if self.super_users.contains(&who.to_string().as_str()) {
            return Decision::Allowed;
        }
        let matching: Vec<&AclBinding> = self.matching(who, groups, client, op, rt, name).collect();
        if matching.iter().any(|a| a.entry.permission == Perm::Deny) {
            Decision::Denied
        } else if matching.iter().any(|a| a.entry.permission == Perm::Allow) {
            Decision::Allowed
        } else if !self.acls.iter().any(|a| Self::applies(a, rt, name)) && self.allow_everyone {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }

    /// Kafka's `Authorizer.authorizeByResourceType` default method.
    fn by_resource_type(
        &self,
        who: &Principal,
        groups: &[Principal],
        client: IpAddr,
        op: Op,
        rt: Rt,
    ) -> Decision {
        if self.authorize(who, groups, client, op, rt, "hardcode") == Decision::Allowed {
            return Decision::Allowed;
        }
        let mut allow_literal = Vec::new();
        let mut allow_prefixed = Vec::new();
        let mut deny_literal = Vec::new();
        let mut deny_prefixed = Vec::new();
        let mut wildcard_allow = false;
        for a in self.acls.iter().filter(|a| a.pattern.resource_type == rt) {
            if !Self::host_matches(a, client) || !Self::principal_matches(a, who, groups) {
                continue;
            }
            if a.entry.operation != op && a.entry.operation != Op::All {
                continue;
            }
            let name = a.pattern.name.as_str();
            match (a.entry.permission, a.pattern.pattern_type) {
                (Perm::Deny, Pt::Literal) if name == "*" => return Decision::Denied,
                (Perm::Deny, Pt::Literal) => deny_literal.push(name),
                (Perm::Deny, _) => deny_prefixed.push(name),
                (_, Pt::Literal) if name == "*" => wildcard_allow = true,
                (_, Pt::Literal) => allow_literal.push(name),
                (_, _) => allow_prefixed.push(name),
            }
        }
        if wildcard_allow {
            return Decision::Allowed;
        }
        let dominated = |s: &str| deny_prefixed.iter().any(|d| s.starts_with(d));
        if allow_literal
            .iter()
            .any(|l| !deny_literal.contains(l) && !dominated(l))
            || allow_prefixed.iter().any(|p| !dominated(p))
        {
            Decision::Allowed
        } else {
            Decision::Denied
        }
    }
}

fn context(ask: &Ask) -> RequestContext<'_> {
    let groups: Vec<Principal> = ask
        .groups
        .iter()
        .map(|g| Principal::parse(g).unwrap())
        .collect();
    RequestContext::new(
        Principal::parse(ask.principal).unwrap(),
        ask.client.parse().unwrap(),
        "PLAIN",
        0,
        0,
        1,
    )
    .with_groups(groups)
}

fn check(
    acls: Vec<AclBinding>,
    removed: Vec<prop::sample::Index>,
    super_mask: usize,
    allow_everyone: bool,
    asks: Vec<Ask>,
) -> Result<(), TestCaseError> {
    let super_users: Vec<&str> = SUPER
        .iter()
        .enumerate()
        .filter(|(i, _)| super_mask & (1 << i) != 0)
        .map(|(_, s)| *s)
        .collect();
    let config = AclAuthorizerConfig::new(
        super_users.iter().map(|s| s.to_string()).collect(),
        allow_everyone,
    );
    let store = Arc::new(MemoryStore::default());
    let authorizer = AclAuthorizer::open(&config, store.clone()).unwrap();
    // Build incrementally (two batches), then delete some: the copy-on-write path.
    let (first, second) = acls.split_at(acls.len() / 2);
    prop_assert!(authorizer.create_acls(first).iter().all(Result::is_ok));
    prop_assert!(authorizer.create_acls(second).iter().all(Result::is_ok));
    let mut live: Vec<AclBinding> = acls.clone();
    live.sort();
    live.dedup();
    for index in &removed {
        if live.is_empty() {
            break;
        }
        let victim = live.remove(index.index(live.len()));
        let filter = AclBindingFilter {
            pattern: portcullis::acl::ResourcePatternFilter {
                resource_type: victim.pattern.resource_type,
                name: Some(victim.pattern.name.clone()),
                pattern_type: victim.pattern.pattern_type,
            },
            entry: portcullis::acl::AccessControlEntryFilter {
                principal: Some(victim.entry.principal.clone()),
                host: Some(victim.entry.host.clone()),
                operation: victim.entry.operation,
                permission: victim.entry.permission,
            },
        };
        prop_assert_eq!(
            authorizer.delete_acls(&[filter]).unwrap(),
            vec![vec![victim]]
        );
    }
    prop_assert_eq!(
        authorizer.describe_acls(&AclBindingFilter::any()),
        live.clone()
    );
    // A restart replays the same set.
    let reopened = AclAuthorizer::open(&config, store).unwrap();

    let model = Model {
        acls: &live,
        super_users: &super_users,
        allow_everyone,
    };
    for ask in &asks {
        let ctx = context(ask);
        let who = &ctx.principal;
        let groups = &ctx.groups;
        let client = ctx.client_address;
        let expected = model.authorize(
            who,
            groups,
            client,
            ask.operation,
            ask.resource_type,
            ask.name,
        );
        let action = Action::new(ask.operation, ask.resource_type, ask.name);
        for az in [&authorizer, &reopened] {
            let got = az.authorize(&ctx, std::slice::from_ref(&action)).remove(0);
            prop_assert_eq!(got.decision, expected, "authorize {:?}", ask);
            prop_assert_eq!(az.decide(&ctx, &action), expected);
            // The reported rule is a witness of the decision.
            match &got.rule {
                DecidingRule::MatchingAcl(b) => {
                    let witnesses: Vec<&AclBinding> = model
                        .matching(
                            who,
                            groups,
                            client,
                            ask.operation,
                            ask.resource_type,
                            ask.name,
                        )
                        .collect();
                    prop_assert!(witnesses.contains(&&**b), "{:?} not matching", b);
                    let wanted = if expected == Decision::Allowed {
                        Perm::Allow
                    } else {
                        Perm::Deny
                    };
                    prop_assert_eq!(b.entry.permission, wanted);
                }
                DecidingRule::SuperUser => {
                    prop_assert!(super_users.contains(&who.to_string().as_str()))
                }
                DecidingRule::DefaultAllow => prop_assert!(allow_everyone),
                _ => prop_assert_eq!(expected, Decision::Denied),
            }
            let expected_rt =
                model.by_resource_type(who, groups, client, ask.operation, ask.resource_type);
            prop_assert_eq!(
                az.authorize_by_resource_type(&ctx, ask.operation, ask.resource_type),
                expected_rt,
                "by resource type {:?}",
                ask
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn wide_alphabet_agrees_with_the_reference_model(
        acls in prop::collection::vec(acl_strategy(WIDE), 0..28),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        super_mask in 0usize..4,
        allow_everyone in any::<bool>(),
        asks in prop::collection::vec(ask_strategy(WIDE), 1..24),
    ) {
        check(acls, removed, super_mask, allow_everyone, asks)?;
    }
}

proptest! {
    // Cheap cases, and the rare shapes (a denied prefix in the middle of allowed names) need many.
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn dense_alphabet_agrees_with_the_reference_model(
        acls in prop::collection::vec(acl_strategy(DENSE), 0..12),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        super_mask in 0usize..2,
        allow_everyone in any::<bool>(),
        asks in prop::collection::vec(ask_strategy(DENSE), 1..16),
    ) {
        check(acls, removed, super_mask, allow_everyone, asks)?;
    }
}
