//! Groups as principals, beyond Kafka: a session authenticated with a bearer token carries one
//! `Group:<name>` principal per group of its token, and the ACLs of the user principal and of
//! each group apply with Kafka's rules over that set — a DENY matching any of them denies,
//! otherwise an ALLOW matching any of them allows. Super users are matched on the user only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

mod common;

use common::{acl, allow, ctx, ctx_with_groups, deny, fixture};
use portcullis::acl::{AclOperation as Op, PatternType as Pt, PermissionType, ResourceType as Rt};
use portcullis::authorizer::{Action, Authorizer, DecidingRule, Decision};

const LOCAL: &str = "127.0.0.1";

#[test]
fn a_groups_allow_allows_its_members() {
    let f = fixture(&[], false);
    let readers = allow(Rt::Topic, Pt::Literal, "orders", "Group:readers", Op::Read);
    f.add(std::slice::from_ref(&readers));
    let a = f.check_with_groups(
        "User:alice",
        &["Group:ops", "Group:readers"],
        LOCAL,
        Op::Read,
        Rt::Topic,
        "orders",
    );
    assert_eq!(
        (a.decision, a.rule),
        (
            Decision::Allowed,
            DecidingRule::MatchingAcl(std::sync::Arc::new(readers))
        )
    );
    // READ implies DESCRIBE for a group's ACL as for a user's.
    assert!(f.allowed_with_groups("User:alice", &["Group:readers"], Op::Describe, "orders"));
    // Not a member, or no token: refused.
    assert!(!f.allowed_with_groups("User:alice", &["Group:ops"], Op::Read, "orders"));
    assert!(!f.allowed("User:alice", LOCAL, Op::Read, Rt::Topic, "orders"));
    // Another operation is not allowed by it.
    assert!(!f.allowed_with_groups("User:alice", &["Group:readers"], Op::Write, "orders"));
}

#[test]
fn a_groups_deny_beats_the_users_allow() {
    let f = fixture(&[], false);
    let denied = deny(Rt::Topic, Pt::Prefixed, "ord", "Group:suspended", Op::Read);
    f.add(&[
        allow(Rt::Topic, Pt::Literal, "orders", "User:alice", Op::Read),
        denied.clone(),
    ]);
    assert!(f.allowed("User:alice", LOCAL, Op::Read, Rt::Topic, "orders"));
    let a = f.check_with_groups(
        "User:alice",
        &["Group:readers", "Group:suspended"],
        LOCAL,
        Op::Read,
        Rt::Topic,
        "orders",
    );
    assert_eq!(
        (a.decision, a.rule),
        (
            Decision::Denied,
            DecidingRule::MatchingAcl(std::sync::Arc::new(denied))
        )
    );
}

#[test]
fn the_users_deny_beats_a_groups_allow() {
    let f = fixture(&[], false);
    f.add(&[
        allow(Rt::Topic, Pt::Literal, "*", "Group:readers", Op::Read),
        deny(Rt::Topic, Pt::Literal, "orders", "User:alice", Op::Read),
    ]);
    assert!(!f.allowed_with_groups("User:alice", &["Group:readers"], Op::Read, "orders"));
    assert!(f.allowed_with_groups("User:alice", &["Group:readers"], Op::Read, "payments"));
    assert!(f.allowed_with_groups("User:bob", &["Group:readers"], Op::Read, "orders"));
}

#[test]
fn one_groups_deny_beats_another_groups_allow_and_user_wildcard_acls_still_apply() {
    let f = fixture(&[], false);
    f.add(&[
        allow(Rt::Topic, Pt::Literal, "orders", "Group:readers", Op::All),
        deny(Rt::Topic, Pt::Literal, "orders", "Group:interns", Op::Write),
        allow(Rt::Topic, Pt::Literal, "public", "User:*", Op::Read),
        deny(Rt::Topic, Pt::Literal, "secret", "User:*", Op::Read),
        allow(Rt::Topic, Pt::Literal, "secret", "Group:readers", Op::Read),
    ]);
    let both = ["Group:readers", "Group:interns"];
    assert!(f.allowed_with_groups("User:alice", &both, Op::Read, "orders"));
    assert!(!f.allowed_with_groups("User:alice", &both, Op::Write, "orders"));
    assert!(f.allowed_with_groups("User:alice", &["Group:readers"], Op::Write, "orders"));
    // `User:*` matches every session, with or without groups; its DENY beats a group's ALLOW.
    assert!(f.allowed_with_groups("User:alice", &both, Op::Read, "public"));
    assert!(!f.allowed_with_groups("User:alice", &both, Op::Read, "secret"));
}

#[test]
fn group_acls_honour_hosts() {
    let f = fixture(&[], false);
    f.add(&[acl(
        Rt::Topic,
        Pt::Literal,
        "orders",
        "Group:readers",
        "10.0.0.1",
        Op::Read,
        PermissionType::Allow,
    )]);
    let read = |host| {
        f.check_with_groups(
            "User:alice",
            &["Group:readers"],
            host,
            Op::Read,
            Rt::Topic,
            "orders",
        )
        .decision
    };
    assert_eq!(read("10.0.0.1"), Decision::Allowed);
    assert_eq!(read("10.0.0.2"), Decision::Denied);
}

#[test]
fn super_users_are_matched_on_the_user_principal_only() {
    let f = fixture(&["User:root", "Group:admins"], false);
    f.add(&[deny(Rt::Topic, Pt::Literal, "t", "Group:readers", Op::All)]);
    // A user who is a super user stays one whatever its groups (even one denied everything).
    let a = f.check_with_groups(
        "User:root",
        &["Group:readers"],
        LOCAL,
        Op::Read,
        Rt::Topic,
        "t",
    );
    assert_eq!(
        (a.decision, a.rule),
        (Decision::Allowed, DecidingRule::SuperUser)
    );
    // A group named in `super_users` makes no member a super user.
    assert!(!f.allowed_with_groups("User:alice", &["Group:admins"], Op::Read, "t"));
    assert_eq!(
        f.authorizer.authorize_by_resource_type(
            &ctx_with_groups("User:alice", &["Group:admins"], LOCAL),
            Op::Read,
            Rt::Topic
        ),
        Decision::Denied
    );
}

#[test]
fn without_groups_every_decision_is_kafkas() {
    let f = fixture(&[], true);
    f.add(&[
        allow(Rt::Topic, Pt::Literal, "t", "Group:readers", Op::Read),
        allow(Rt::Topic, Pt::Literal, "u", "User:alice", Op::Read),
    ]);
    // The group's ACL exists, so `t` has ACLs: no default allow, and alice is not a member.
    assert!(!f.allowed("User:alice", LOCAL, Op::Read, Rt::Topic, "t"));
    assert!(f.allowed("User:alice", LOCAL, Op::Read, Rt::Topic, "u"));
    // No ACL at all on `v`: allow_everyone_if_no_acl_found decides for both.
    assert!(f.allowed("User:alice", LOCAL, Op::Read, Rt::Topic, "v"));
    assert!(f.allowed_with_groups("User:alice", &["Group:readers"], Op::Read, "v"));
    // An empty group list is no group at all.
    assert_eq!(
        f.check_with_groups("User:alice", &[], LOCAL, Op::Read, Rt::Topic, "t"),
        f.check("User:alice", LOCAL, Op::Read, Rt::Topic, "t")
    );
}

#[test]
fn many_groups_and_repeated_groups_decide_the_same() {
    let f = fixture(&[], false);
    let mut acls = Vec::new();
    for i in 0..12 {
        acls.push(allow(
            Rt::Topic,
            Pt::Literal,
            &format!("t{i}"),
            &format!("Group:g{i}"),
            Op::Read,
        ));
    }
    acls.push(deny(Rt::Topic, Pt::Literal, "t11", "Group:g3", Op::Read));
    f.add(&acls);
    let names: Vec<String> = (0..12).map(|i| format!("Group:g{i}")).collect();
    let mut groups: Vec<&str> = names.iter().map(String::as_str).collect();
    // Groups no ACL names, and a repetition, change nothing.
    groups.extend(["Group:unknown", "Group:g0", "User:alice"]);
    for i in 0..11 {
        assert!(f.allowed_with_groups("User:alice", &groups, Op::Read, &format!("t{i}")));
    }
    // g11 allows t11 but g3 (the 4th group) denies it.
    assert!(!f.allowed_with_groups("User:alice", &groups, Op::Read, "t11"));
    assert!(f.allowed_with_groups("User:alice", &groups[11..12], Op::Read, "t11"));
    // Several actions at once decide as one at a time.
    let context = ctx_with_groups("User:alice", &groups, LOCAL);
    let actions: Vec<Action<'_>> = (0..12)
        .map(|i| Action::new(Op::Read, Rt::Topic, format!("t{i}")))
        .collect();
    let decisions: Vec<bool> = f
        .authorizer
        .authorize(&context, &actions)
        .iter()
        .map(|a| a.is_allowed())
        .collect();
    let mut expected = vec![true; 12];
    expected[11] = false;
    assert_eq!(decisions, expected);
}

#[test]
fn by_resource_type_counts_the_groups_acls() {
    let f = fixture(&[], false);
    let alice = ctx("User:alice", LOCAL);
    let member = ctx_with_groups("User:alice", &["Group:writers"], LOCAL);
    let by_type = |c| {
        f.authorizer
            .authorize_by_resource_type(c, Op::Write, Rt::Topic)
    };
    f.add(&[allow(
        Rt::Topic,
        Pt::Prefixed,
        "team-",
        "Group:writers",
        Op::Write,
    )]);
    assert_eq!(by_type(&alice), Decision::Denied);
    assert_eq!(by_type(&member), Decision::Allowed);
    // The user's own DENY on the prefix dominates the group's ALLOW.
    f.add(&[deny(
        Rt::Topic,
        Pt::Prefixed,
        "team",
        "User:alice",
        Op::Write,
    )]);
    assert_eq!(by_type(&member), Decision::Denied);
    // A group's literal ALLOW counts as the user's would.
    let g = fixture(&[], false);
    g.add(&[allow(
        Rt::Topic,
        Pt::Literal,
        "t",
        "Group:writers",
        Op::Write,
    )]);
    assert_eq!(
        g.authorizer
            .authorize_by_resource_type(&member, Op::Write, Rt::Topic),
        Decision::Allowed
    );
}

#[test]
fn group_acls_are_stored_and_described_like_any_other() {
    let f = fixture(&[], false);
    let readers = allow(Rt::Topic, Pt::Literal, "orders", "Group:readers", Op::Read);
    f.add(std::slice::from_ref(&readers));
    let mut filter = portcullis::acl::AclBindingFilter::any();
    filter.entry.principal = Some("Group:readers".into());
    use portcullis::authorizer::AclAdmin;
    assert_eq!(f.authorizer.describe_acls(&filter), vec![readers]);
}
