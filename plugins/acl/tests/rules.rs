//! One test per rule of kafka-security-semantics §6.2 (and the §6.3 by-resource-type default).

mod common;

use common::{acl, allow, ctx, deny, fixture};
use portcullis::acl::{AclOperation as Op, PatternType as Pt, PermissionType, ResourceType as Rt};
use portcullis::authorizer::{Authorizer, DecidingRule, Decision};

const LOCAL: &str = "127.0.0.1";

#[test]
fn super_users_are_allowed_everything_even_against_deny() {
    let f = fixture(&["User:admin", " User:ops ", ""], false);
    f.add(&[deny(Rt::Topic, Pt::Literal, "t", "User:admin", Op::All)]);
    let a = f.check("User:admin", LOCAL, Op::Delete, Rt::Topic, "t");
    assert_eq!(a.decision, Decision::Allowed);
    assert_eq!(a.rule, DecidingRule::SuperUser);
    assert!(f.allowed("User:ops", LOCAL, Op::Write, Rt::Cluster, "kafka-cluster"));
    // Exact string match: another type with the same name is not a super user.
    assert!(!f.allowed("Group:admin", LOCAL, Op::Read, Rt::Topic, "t"));
    assert_eq!(
        f.authorizer
            .authorize_by_resource_type(&ctx("User:admin", LOCAL), Op::Write, Rt::Topic),
        Decision::Allowed
    );
}

#[test]
fn invalid_super_user_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        std::sync::Arc::new(portcullis_plugin_stores::FileMetadataStore::open(dir.path()).unwrap());
    let config = portcullis_plugin_acl::AclAuthorizerConfig::new(vec!["admin".into()], false);
    assert!(matches!(
        portcullis_plugin_acl::AclAuthorizer::open(&config, store),
        Err(portcullis_plugin_acl::AclAuthorizerError::InvalidSuperUser(s)) if s == "admin"
    ));
}

#[test]
fn user_wildcard_matches_everyone_group_wildcard_does_not() {
    let f = fixture(&[], false);
    f.add(&[
        allow(Rt::Topic, Pt::Literal, "t", "User:*", Op::Read),
        allow(Rt::Topic, Pt::Literal, "g", "Group:*", Op::Read),
    ]);
    assert!(f.allowed("User:alice", LOCAL, Op::Read, Rt::Topic, "t"));
    assert!(f.allowed("Service:x", LOCAL, Op::Read, Rt::Topic, "t"));
    assert!(!f.allowed("Group:dev", LOCAL, Op::Read, Rt::Topic, "g"));
    assert!(!f.allowed("User:alice", LOCAL, Op::Read, Rt::Topic, "g"));
    // Only a principal literally named Group:* matches it.
    assert!(f.allowed("Group:*", LOCAL, Op::Read, Rt::Topic, "g"));
}

#[test]
fn host_is_star_or_exact_java_string() {
    let f = fixture(&[], false);
    f.add(&[
        acl(
            Rt::Topic,
            Pt::Literal,
            "t",
            "User:a",
            "10.0.0.1",
            Op::Read,
            PermissionType::Allow,
        ),
        acl(
            Rt::Topic,
            Pt::Literal,
            "v6",
            "User:a",
            "0:0:0:0:0:0:0:1",
            Op::Read,
            PermissionType::Allow,
        ),
        acl(
            Rt::Topic,
            Pt::Literal,
            "v6short",
            "User:a",
            "::1",
            Op::Read,
            PermissionType::Allow,
        ),
        acl(
            Rt::Topic,
            Pt::Literal,
            "star",
            "User:a",
            "*",
            Op::Read,
            PermissionType::Allow,
        ),
    ]);
    assert!(f.allowed("User:a", "10.0.0.1", Op::Read, Rt::Topic, "t"));
    assert!(!f.allowed("User:a", "10.0.0.2", Op::Read, Rt::Topic, "t"));
    // An IPv4 client on a dual-stack socket is an IPv4 address to Kafka.
    assert!(f.allowed("User:a", "::ffff:10.0.0.1", Op::Read, Rt::Topic, "t"));
    // Java prints ::1 as 0:0:0:0:0:0:0:1: only that string matches.
    assert!(f.allowed("User:a", "::1", Op::Read, Rt::Topic, "v6"));
    assert!(!f.allowed("User:a", "::1", Op::Read, Rt::Topic, "v6short"));
    assert!(f.allowed("User:a", "192.168.1.9", Op::Read, Rt::Topic, "star"));
}

#[test]
fn deny_wins_over_allow_across_literal_prefixed_and_star() {
    let f = fixture(&[], false);
    f.add(&[
        allow(Rt::Topic, Pt::Literal, "pay-eu", "User:a", Op::Read),
        deny(Rt::Topic, Pt::Prefixed, "pay", "User:a", Op::Read),
        allow(Rt::Topic, Pt::Literal, "x", "User:a", Op::Read),
        deny(Rt::Topic, Pt::Literal, "*", "User:*", Op::Read),
    ]);
    let a = f.check("User:a", LOCAL, Op::Read, Rt::Topic, "pay-eu");
    assert_eq!(a.decision, Decision::Denied);
    match a.rule {
        DecidingRule::MatchingAcl(b) => assert_eq!(b.entry.permission, PermissionType::Deny),
        other => panic!("{other:?}"),
    }
    // The `*` DENY wins over a literal ALLOW too.
    assert!(!f.allowed("User:a", LOCAL, Op::Read, Rt::Topic, "x"));
}

#[test]
fn deny_implies_nothing_allow_implies_describe() {
    let f = fixture(&[], false);
    f.add(&[
        deny(Rt::Topic, Pt::Literal, "t", "User:a", Op::Read),
        allow(Rt::Topic, Pt::Literal, "t", "User:a", Op::Describe),
    ]);
    // DENY READ does not deny DESCRIBE.
    assert!(f.allowed("User:a", LOCAL, Op::Describe, Rt::Topic, "t"));
    assert!(!f.allowed("User:a", LOCAL, Op::Read, Rt::Topic, "t"));

    for op in [Op::Read, Op::Write, Op::Delete, Op::Alter] {
        let g = fixture(&[], false);
        g.add(&[allow(Rt::Topic, Pt::Literal, "t", "User:a", op)]);
        assert!(
            g.allowed("User:a", LOCAL, Op::Describe, Rt::Topic, "t"),
            "{op}"
        );
        assert!(
            !g.allowed("User:a", LOCAL, Op::DescribeConfigs, Rt::Topic, "t"),
            "{op}"
        );
    }
    for op in [
        Op::Create,
        Op::ClusterAction,
        Op::IdempotentWrite,
        Op::DescribeConfigs,
    ] {
        let g = fixture(&[], false);
        g.add(&[allow(Rt::Topic, Pt::Literal, "t", "User:a", op)]);
        assert!(
            !g.allowed("User:a", LOCAL, Op::Describe, Rt::Topic, "t"),
            "{op}"
        );
    }
    let g = fixture(&[], false);
    g.add(&[allow(
        Rt::Topic,
        Pt::Literal,
        "t",
        "User:a",
        Op::AlterConfigs,
    )]);
    assert!(g.allowed("User:a", LOCAL, Op::DescribeConfigs, Rt::Topic, "t"));
    assert!(!g.allowed("User:a", LOCAL, Op::Describe, Rt::Topic, "t"));
    // DENY ALTER_CONFIGS does not deny DESCRIBE_CONFIGS; DENY ALL denies everything.
    let g = fixture(&[], false);
    g.add(&[
        deny(Rt::Topic, Pt::Literal, "t", "User:a", Op::AlterConfigs),
        allow(Rt::Topic, Pt::Literal, "t", "User:a", Op::All),
    ]);
    assert!(g.allowed("User:a", LOCAL, Op::DescribeConfigs, Rt::Topic, "t"));
    assert!(!g.allowed("User:a", LOCAL, Op::AlterConfigs, Rt::Topic, "t"));
    g.add(&[deny(Rt::Topic, Pt::Literal, "t", "User:a", Op::All)]);
    assert!(!g.allowed("User:a", LOCAL, Op::Describe, Rt::Topic, "t"));
}

#[test]
fn literal_star_and_prefixed_apply() {
    let f = fixture(&[], false);
    f.add(&[
        allow(Rt::Group, Pt::Literal, "*", "User:a", Op::Read),
        allow(Rt::Topic, Pt::Prefixed, "pay", "User:b", Op::Write),
        allow(Rt::Topic, Pt::Literal, "pay", "User:c", Op::Write),
    ]);
    assert!(f.allowed("User:a", LOCAL, Op::Read, Rt::Group, "any-group"));
    assert!(!f.allowed("User:a", LOCAL, Op::Read, Rt::Topic, "any-topic"));
    assert!(f.allowed("User:b", LOCAL, Op::Write, Rt::Topic, "payments"));
    assert!(f.allowed("User:b", LOCAL, Op::Write, Rt::Topic, "pay"));
    assert!(!f.allowed("User:b", LOCAL, Op::Write, Rt::Topic, "pa"));
    // A LITERAL name is not a prefix.
    assert!(!f.allowed("User:c", LOCAL, Op::Write, Rt::Topic, "payments"));
    assert!(f.allowed("User:c", LOCAL, Op::Write, Rt::Topic, "pay"));
    // Multi-byte names: prefixes are compared on characters.
    f.add(&[allow(Rt::Topic, Pt::Prefixed, "é", "User:d", Op::Read)]);
    assert!(f.allowed("User:d", LOCAL, Op::Read, Rt::Topic, "été"));
    assert!(!f.allowed("User:d", LOCAL, Op::Read, Rt::Topic, "e"));
}

#[test]
fn allow_everyone_only_when_no_acl_at_all_applies() {
    let f = fixture(&[], true);
    f.add(&[allow(
        Rt::Topic,
        Pt::Literal,
        "guarded",
        "User:owner",
        Op::Read,
    )]);
    let open = f.check("User:x", LOCAL, Op::Write, Rt::Topic, "open");
    assert_eq!(
        (open.decision, open.rule),
        (Decision::Allowed, DecidingRule::DefaultAllow)
    );
    // Some ACL applies (another principal, another operation): DENIED.
    let guarded = f.check("User:x", LOCAL, Op::Write, Rt::Topic, "guarded");
    assert_eq!(
        (guarded.decision, guarded.rule),
        (Decision::Denied, DecidingRule::DefaultDeny)
    );
    // An ACL with a host that matches nobody still counts as "an ACL exists".
    f.add(&[acl(
        Rt::Topic,
        Pt::Prefixed,
        "ho",
        "User:owner",
        "no-such-host",
        Op::Read,
        PermissionType::Allow,
    )]);
    assert!(!f.allowed("User:x", LOCAL, Op::Read, Rt::Topic, "host-guarded"));
    // A `*` ACL applies to every resource of its type only.
    f.add(&[allow(Rt::Group, Pt::Literal, "*", "User:owner", Op::Read)]);
    assert!(!f.allowed("User:x", LOCAL, Op::Read, Rt::Group, "g"));
    assert!(f.allowed("User:x", LOCAL, Op::Read, Rt::TransactionalId, "tx"));

    let strict = fixture(&[], false);
    let a = strict.check("User:x", LOCAL, Op::Read, Rt::Topic, "open");
    assert_eq!(
        (a.decision, a.rule),
        (Decision::Denied, DecidingRule::DefaultDeny)
    );
}

#[test]
fn allow_everyone_read_from_a_live_handle_follows_it() {
    let common::Fixture { dir, authorizer } = fixture(&[], false);
    let live = portcullis::registry::LiveAllowEveryone::new(true);
    let f = common::Fixture {
        dir,
        authorizer: authorizer.with_live_allow_everyone(live.clone()),
    };
    assert!(
        !live.get(),
        "the authorizer's own setting goes into the handle first"
    );
    assert!(!f.allowed("User:x", LOCAL, Op::Read, Rt::Topic, "open"));
    live.set(true);
    assert!(f.allowed("User:x", LOCAL, Op::Read, Rt::Topic, "open"));
    live.set(false);
    assert!(!f.allowed("User:x", LOCAL, Op::Read, Rt::Topic, "open"));
}

#[test]
fn user_resource_tokens_and_delegation_token_resource() {
    let f = fixture(&[], false);
    f.add(&[
        allow(
            Rt::User,
            Pt::Literal,
            "User:bob",
            "User:alice",
            Op::CreateTokens,
        ),
        allow(
            Rt::User,
            Pt::Prefixed,
            "User:team-",
            "User:lead",
            Op::DescribeTokens,
        ),
        allow(
            Rt::DelegationToken,
            Pt::Literal,
            "token-1",
            "User:alice",
            Op::Describe,
        ),
    ]);
    assert!(f.allowed("User:alice", LOCAL, Op::CreateTokens, Rt::User, "User:bob"));
    assert!(!f.allowed(
        "User:alice",
        LOCAL,
        Op::DescribeTokens,
        Rt::User,
        "User:bob"
    ));
    assert!(!f.allowed(
        "User:alice",
        LOCAL,
        Op::CreateTokens,
        Rt::User,
        "User:carol"
    ));
    assert!(f.allowed(
        "User:lead",
        LOCAL,
        Op::DescribeTokens,
        Rt::User,
        "User:team-x"
    ));
    assert!(f.allowed(
        "User:alice",
        LOCAL,
        Op::Describe,
        Rt::DelegationToken,
        "token-1"
    ));
    assert!(!f.allowed(
        "User:alice",
        LOCAL,
        Op::Describe,
        Rt::DelegationToken,
        "token-2"
    ));
    // CREATE_TOKENS implies nothing else.
    assert!(!f.allowed("User:alice", LOCAL, Op::Describe, Rt::User, "User:bob"));
}

#[test]
fn matching_acl_is_reported() {
    let f = fixture(&[], false);
    let b = allow(Rt::Topic, Pt::Prefixed, "log", "User:a", Op::Read);
    f.add(std::slice::from_ref(&b));
    let a = f.check("User:a", LOCAL, Op::Describe, Rt::Topic, "logs");
    assert_eq!(
        (a.decision, a.rule),
        (
            Decision::Allowed,
            DecidingRule::MatchingAcl(std::sync::Arc::new(b))
        )
    );
}

#[test]
fn by_resource_type_follows_kafkas_default() {
    let f = fixture(&[], false);
    let c = ctx("User:a", LOCAL);
    let az = |op| f.authorizer.authorize_by_resource_type(&c, op, Rt::Topic);
    assert_eq!(az(Op::Write), Decision::Denied);
    f.add(&[allow(Rt::Topic, Pt::Literal, "t1", "User:a", Op::Write)]);
    assert_eq!(az(Op::Write), Decision::Allowed);
    // No implications here: WRITE does not give DESCRIBE by resource type.
    assert_eq!(az(Op::Describe), Decision::Denied);
    // A literal deny of the same name dominates the literal allow.
    f.add(&[deny(Rt::Topic, Pt::Literal, "t1", "User:a", Op::Write)]);
    assert_eq!(az(Op::Write), Decision::Denied);
    // A prefixed allow is not dominated by a literal deny of the same name.
    f.add(&[allow(Rt::Topic, Pt::Prefixed, "t1", "User:a", Op::Write)]);
    assert_eq!(az(Op::Write), Decision::Allowed);
    // A deny on a prefix dominates both.
    f.add(&[deny(Rt::Topic, Pt::Prefixed, "t", "User:*", Op::All)]);
    assert_eq!(az(Op::Write), Decision::Denied);
    f.add(&[allow(Rt::Topic, Pt::Literal, "other", "User:a", Op::All)]);
    assert_eq!(az(Op::Write), Decision::Allowed);
    // A `*` DENY denies whatever else is allowed; a `*` ALLOW allows.
    f.add(&[allow(Rt::Group, Pt::Literal, "*", "User:a", Op::Read)]);
    assert_eq!(
        f.authorizer
            .authorize_by_resource_type(&c, Op::Read, Rt::Group),
        Decision::Allowed
    );
    f.add(&[deny(Rt::Group, Pt::Literal, "*", "User:*", Op::Read)]);
    assert_eq!(
        f.authorizer
            .authorize_by_resource_type(&c, Op::Read, Rt::Group),
        Decision::Denied
    );
    // The `hardcode` pre-check: allow_everyone with no ACL for that name allows.
    let open = fixture(&[], true);
    assert_eq!(
        open.authorizer
            .authorize_by_resource_type(&c, Op::Write, Rt::Topic),
        Decision::Allowed
    );
}

/// Kafka 4.4's StandardAuthorizer loops forever (`!a` ACL, `!b` asked) or throws
/// StringIndexOutOfBoundsException (`!ab` ACL, `!ax` asked) on names that sort below `*`: its
/// wildcard-section re-seek cuts the *action's* common prefix length out of the string `*`.
/// Group ids and transactional ids may start with such characters. The §6.2 semantics say
/// neither ACL applies: no ACL exists for the resource.
#[test]
fn names_sorting_below_star_get_the_specified_answer() {
    let f = fixture(&[], true);
    f.add(&[
        allow(Rt::Group, Pt::Prefixed, "!a", "User:x", Op::Read),
        allow(Rt::Group, Pt::Prefixed, "!ab", "User:x", Op::Read),
        allow(Rt::Group, Pt::Literal, "*", "User:z", Op::Write),
    ]);
    let a = f.check("User:y", LOCAL, Op::Read, Rt::Group, "!b");
    // The `*` ACL applies, so this is DefaultDeny, not DefaultAllow.
    assert_eq!(
        (a.decision, a.rule),
        (Decision::Denied, DecidingRule::DefaultDeny)
    );
    assert!(f.allowed("User:x", LOCAL, Op::Read, Rt::Group, "!abx"));
    assert!(!f.allowed("User:y", LOCAL, Op::Read, Rt::Group, "!ax"));
    assert!(f.allowed("User:y", LOCAL, Op::Read, Rt::TransactionalId, "!b"));
}
