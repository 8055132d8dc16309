//! The authorizer across the C ABI: the built-in `acl` authorizer exported as a plugin
//! ([`AclOverAbi`], created through the same export → validate → create path a library in the
//! plugin directory takes) decides exactly what the linked authorizer decides, for random ACLs,
//! random requests of several actions (names with multi-byte characters, empty ones), random
//! principals and client addresses — and `authorize_by_resource_type` agrees too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::net::IpAddr;
use std::sync::Arc;

use portcullis::abi::{export_services, validate_declaration, ABI_VERSION};
use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation as Op, PatternType as Pt, PermissionType as Perm,
    ResourcePattern, ResourceType as Rt,
};
use portcullis::authorizer::{Action, Authorization, Authorizer, DecidingRule, RequestContext};
use portcullis::principal::Principal;
use portcullis::registry::PluginInstance;
use portcullis::Host;
use portcullis_plugin_acl::over_abi::{AclOverAbi, OverAbiConfig};
use portcullis_plugin_acl::{AclAuthorizer, AclAuthorizerConfig};
use proptest::prelude::*;

const TYPES: &[Rt] = &[
    Rt::Topic,
    Rt::Group,
    Rt::Cluster,
    Rt::TransactionalId,
    Rt::User,
];
const NAMES: &[&str] = &["a", "ab", "abc", "é", "éa", "*", "kafka-cluster", "User:b"];
const QUERY_NAMES: &[&str] = &[
    "a",
    "ab",
    "abcd",
    "é",
    "éa",
    "",
    "kafka-cluster",
    "User:b",
    "x",
];
const PRINCIPALS: &[&str] = &["User:a", "User:b", "User:*", "Group:a", "Group:é"];
const GROUPS: &[&str] = &["Group:a", "Group:é", "Group:b", "Group:c", "Group:d"];
const ASKERS: &[&str] = &["User:a", "User:b", "User:é", "Group:a", "User:admin"];
const HOSTS: &[&str] = &["*", "127.0.0.1", "::1"];
const CLIENTS: &[&str] = &["127.0.0.1", "::1", "10.0.0.1"];
const OPS: &[Op] = &[
    Op::Read,
    Op::Write,
    Op::Create,
    Op::Describe,
    Op::All,
    Op::Alter,
    Op::IdempotentWrite,
];

fn acl() -> impl Strategy<Value = AclBinding> {
    (
        prop::sample::select(TYPES),
        prop::sample::select(&[Pt::Literal, Pt::Prefixed][..]),
        prop::sample::select(NAMES),
        prop::sample::select(PRINCIPALS),
        prop::sample::select(HOSTS),
        prop::sample::select(OPS),
        prop::sample::select(&[Perm::Allow, Perm::Deny][..]),
    )
        .prop_map(|(rt, pt, name, principal, host, operation, permission)| {
            let mut binding = AclBinding {
                pattern: ResourcePattern::new(rt, name, pt),
                entry: AccessControlEntry {
                    principal: principal.into(),
                    host: host.into(),
                    operation,
                    permission,
                },
            };
            // Only what CreateAcls stores: the CLUSTER resource is always kafka-cluster.
            if rt == Rt::Cluster {
                binding.pattern = ResourcePattern::literal(Rt::Cluster, "kafka-cluster");
            }
            binding
        })
}

/// One action of a request: (operation, resource type, name, log flags).
fn action() -> impl Strategy<Value = (Op, Rt, &'static str, bool)> {
    (
        prop::sample::select(OPS),
        prop::sample::select(TYPES),
        prop::sample::select(QUERY_NAMES),
        any::<bool>(),
    )
}

/// A request: who asks (with which groups), from where, and 1 to 12 actions (more than fit on
/// the host's stack buffers, so both paths are taken).
type Request = (
    &'static str,
    Vec<&'static str>,
    &'static str,
    Vec<(Op, Rt, &'static str, bool)>,
);

fn request() -> impl Strategy<Value = Request> {
    (
        prop::sample::select(ASKERS),
        prop::collection::vec(prop::sample::select(GROUPS), 0..7),
        prop::sample::select(CLIENTS),
        prop::collection::vec(action(), 1..12),
    )
}

fn linked(config: &OverAbiConfig) -> AclAuthorizer {
    let store = Arc::new(portcullis::store::memory::MemoryStore::new());
    let records: Vec<_> = config
        .acls
        .iter()
        .cloned()
        .map(|binding| portcullis::store::MetadataRecord::Acl { binding })
        .collect();
    portcullis::store::MetadataStore::append(store.as_ref(), &records).unwrap();
    AclAuthorizer::open(
        &AclAuthorizerConfig::new(
            config.super_users.clone(),
            config.allow_everyone_if_no_acl_found,
        ),
        store,
    )
    .unwrap()
}

/// The same authorizer, created as a dynamic plugin is: a declaration, validated, its
/// export created with the configuration as TOML text and the host's services table.
fn over_abi(config: &OverAbiConfig) -> Arc<dyn Authorizer> {
    let exports = Box::leak(Box::new([portcullis::abi::__private::authorizer::<
        AclOverAbi,
    >()]));
    let declaration = Box::leak(Box::new(portcullis::abi::__private::declaration(
        exports,
        ABI_VERSION,
    )));
    // SAFETY: a declaration made by the plugin API in this process, its tables real statics.
    let library = unsafe { validate_declaration(declaration) }.unwrap();
    let text = toml::to_string(config).unwrap();
    let services = export_services(Host::detached().services().clone());
    match library.exports()[0].create(&text, services).unwrap() {
        PluginInstance::Authorizer(authorizer) => authorizer,
        other => panic!("{other:?}"),
    }
}

/// What both must agree on: the decision, and the rule up to what crosses the ABI (an ACL's
/// binding does not: it is reported as the plugin's own rule).
fn comparable(answer: &Authorization) -> (bool, &'static str) {
    let rule = match answer.rule {
        DecidingRule::SuperUser => "super user",
        DecidingRule::DefaultAllow => "default allow",
        DecidingRule::DefaultDeny => "default deny",
        DecidingRule::MatchingAcl(_) | DecidingRule::Plugin { .. } => "an ACL",
        _ => "other",
    };
    (answer.is_allowed(), rule)
}

fn each(
    authorizer: &dyn Authorizer,
    context: &RequestContext<'_>,
    actions: &[Action<'_>],
) -> Vec<(bool, &'static str)> {
    let mut answers = vec![(false, "missing"); actions.len()];
    authorizer.authorize_each(context, actions, &mut |i, answer| {
        answers[i] = comparable(&answer);
    });
    answers
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decisions_across_the_abi_equal_the_linked_authorizers(
        acls in prop::collection::vec(acl(), 0..24),
        super_user in any::<bool>(),
        allow_everyone in any::<bool>(),
        requests in prop::collection::vec(request(), 1..6),
    ) {
        let config = OverAbiConfig {
            super_users: if super_user { vec!["User:admin".into()] } else { Vec::new() },
            allow_everyone_if_no_acl_found: allow_everyone,
            acls,
        };
        let direct = linked(&config);
        let dynamic = over_abi(&config);
        for (asker, groups, client, wanted) in &requests {
            let principal = Principal::parse(asker).unwrap();
            let groups: Vec<Principal> = groups.iter().map(|g| Principal::parse(g).unwrap()).collect();
            let scopes: Vec<String> = groups.iter().map(|g| format!("scope-{}", g.name)).collect();
            let address: IpAddr = client.parse().unwrap();
            let context = RequestContext::new(&principal, address, "PLAIN", 0, 9, 7)
                .with_client_id(Some("client-é"))
                .with_groups(groups.as_slice())
                .with_scopes(scopes.as_slice())
                .with_jti(groups.first().map(|g| g.name.as_str()));
            let actions: Vec<Action<'_>> = wanted
                .iter()
                .map(|&(op, rt, name, quiet)| {
                    let action = Action::new(op, rt, name);
                    if quiet { action.quiet() } else { action }
                })
                .collect();
            prop_assert_eq!(
                each(&direct, &context, &actions),
                each(dynamic.as_ref(), &context, &actions)
            );
            let answers: Vec<_> = dynamic.authorize(&context, &actions).iter().map(comparable).collect();
            prop_assert_eq!(each(&direct, &context, &actions), answers);
            for &(op, rt, _, _) in wanted {
                prop_assert_eq!(
                    direct.authorize_by_resource_type(&context, op, rt),
                    dynamic.authorize_by_resource_type(&context, op, rt),
                    "by resource type {:?} {:?}", op, rt
                );
            }
        }
    }
}

#[test]
fn acl_administration_works_across_the_abi() {
    let dynamic = over_abi(&OverAbiConfig::default());
    let admin = dynamic.acl_admin().expect("the acl authorizer stores ACLs");
    let binding = AclBinding {
        pattern: ResourcePattern::new(Rt::Topic, "orders", Pt::Prefixed),
        entry: AccessControlEntry {
            principal: "User:a".into(),
            host: "*".into(),
            operation: Op::Write,
            permission: Perm::Allow,
        },
    };
    let mut invalid = binding.clone();
    invalid.entry.principal = "no-colon".into();
    let results = admin.create_acls(&[binding.clone(), invalid]);
    assert!(results[0].is_ok());
    assert!(results[1].is_err());
    assert_eq!(
        admin.describe_acls(&portcullis::acl::AclBindingFilter::any()),
        std::slice::from_ref(&binding)
    );
    let principal = Principal::user("a");
    let context = RequestContext::new(&principal, "127.0.0.1".parse().unwrap(), "l", 0, 9, 1);
    let write = [Action::new(Op::Write, Rt::Topic, "orders-eu")];
    assert!(dynamic.authorize(&context, &write)[0].is_allowed());
    let deleted = admin
        .delete_acls(&[portcullis::acl::AclBindingFilter::any()])
        .unwrap();
    assert_eq!(deleted, [vec![binding]]);
    assert!(!dynamic.authorize(&context, &write)[0].is_allowed());
}
