//! `authorize()` through the C ABI against the same authorizer linked in: the cost a dynamic
//! authorizer plugin adds per call (target: < 50 ns). Two authorizers, each measured both ways:
//!
//! - `acl`: the built-in ACL authorizer on 10,000 ACLs (100 principals, literal and prefixed
//!   topics and groups), the realistic case;
//! - `allow-all`: an authorizer that decides nothing, so the difference is all crossing.
//!
//! Requests of 1 action (a produce to one topic) and of 8 (a metadata or fetch request naming
//! eight topics), through `authorize_each`, the allocation-free form the request path calls.
//! The ABI side is created exactly as a library from the plugin directory is (declaration,
//! validation, `create` with a TOML configuration and the services table); only `dlopen` is
//! missing, which adds no cost per call (the same function pointers either way).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a benchmark harness, not shipped"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::abi::{export_services, validate_declaration, PluginExport, ABI_VERSION};
use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use portcullis::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis::plugin_api::NoConfig;
use portcullis::principal::Principal;
use portcullis::registry::PluginInstance;
use portcullis::{Host, Plugin, PluginError};
use portcullis_plugin_acl::over_abi::{AclOverAbi, OverAbiConfig};

/// Allows everything, deciding nothing: the crossing alone.
struct AllowAll;

impl Plugin for AllowAll {
    const NAME: &'static str = "allow-all";
    type Config = NoConfig;
    fn new(_: NoConfig, _: &Host) -> Result<Self, PluginError> {
        Ok(AllowAll)
    }
}

impl Authorizer for AllowAll {
    fn authorize(&self, _: &RequestContext<'_>, actions: &[Action<'_>]) -> Vec<Authorization> {
        actions
            .iter()
            .map(|_| Authorization::allowed(DecidingRule::DefaultAllow))
            .collect()
    }
    fn authorize_each(
        &self,
        _: &RequestContext<'_>,
        actions: &[Action<'_>],
        decided: &mut dyn FnMut(usize, Authorization),
    ) {
        for i in 0..actions.len() {
            decided(i, Authorization::allowed(DecidingRule::DefaultAllow));
        }
    }
    fn authorize_by_resource_type(
        &self,
        _: &RequestContext<'_>,
        _: AclOperation,
        _: ResourceType,
    ) -> Decision {
        Decision::Allowed
    }
}

fn create(export: PluginExport, config: &str) -> Arc<dyn Authorizer> {
    let exports: &'static [PluginExport] = Box::leak(Box::new([export]));
    let declaration = Box::leak(Box::new(portcullis::abi::__private::declaration(
        exports,
        ABI_VERSION,
    )));
    // SAFETY: a declaration made by the plugin API in this process.
    let library = unsafe { validate_declaration(declaration) }.unwrap();
    let services = export_services(Host::detached().services().clone());
    match library.exports()[0].create(config, services).unwrap() {
        PluginInstance::Authorizer(authorizer) => authorizer,
        _ => panic!("not an authorizer"),
    }
}

fn corpus() -> OverAbiConfig {
    let mut acls = Vec::new();
    for p in 0..100 {
        let principal = format!("User:user-{p}");
        for t in 0..50 {
            let (name, pattern) = if t % 2 == 0 {
                (format!("team-{p}.topic-{t}"), PatternType::Literal)
            } else {
                (format!("team-{p}.prefix-{t}."), PatternType::Prefixed)
            };
            for (resource_type, operation) in [
                (ResourceType::Topic, AclOperation::Write),
                (ResourceType::Topic, AclOperation::Describe),
            ] {
                acls.push(AclBinding {
                    pattern: ResourcePattern::new(resource_type, name.clone(), pattern),
                    entry: AccessControlEntry {
                        principal: principal.clone(),
                        host: "*".into(),
                        operation,
                        permission: PermissionType::Allow,
                    },
                });
            }
        }
    }
    OverAbiConfig {
        super_users: vec!["User:admin".into()],
        allow_everyone_if_no_acl_found: false,
        acls,
    }
}

fn bench(c: &mut Criterion) {
    let config = corpus();
    let text = toml::to_string(&config).unwrap();
    let acl_linked: Arc<dyn Authorizer> =
        Arc::new(AclOverAbi::new(config, &Host::detached()).unwrap());
    let acl_abi = create(
        portcullis::abi::__private::authorizer::<AclOverAbi>(),
        &text,
    );
    let allow_linked: Arc<dyn Authorizer> = Arc::new(AllowAll);
    let allow_abi = create(portcullis::abi::__private::authorizer::<AllowAll>(), "");

    let principal = Principal::user("user-42");
    let context = RequestContext::new(&principal, "10.1.2.3".parse().unwrap(), "external", 0, 9, 7)
        .with_client_id(Some("producer-1"));
    let names: Vec<String> = (0..8)
        .map(|t| {
            if t % 2 == 0 {
                format!("team-42.topic-{}", t * 2)
            } else {
                format!("team-42.prefix-{}.orders", t * 2 + 1)
            }
        })
        .collect();
    let eight: Vec<Action<'_>> = names
        .iter()
        .map(|n| Action::new(AclOperation::Write, ResourceType::Topic, n.as_str()))
        .collect();
    let one = &eight[..1];

    let mut group = c.benchmark_group("authorize_each");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, authorizer) in [
        ("acl/linked", &acl_linked),
        ("acl/abi", &acl_abi),
        ("allow-all/linked", &allow_linked),
        ("allow-all/abi", &allow_abi),
    ] {
        for (size, actions) in [("1", one), ("8", &eight[..])] {
            // The answers must be the same both ways; checked once, outside the timing.
            let mut allowed = 0;
            authorizer.authorize_each(&context, actions, &mut |_, a| {
                allowed += usize::from(a.is_allowed())
            });
            assert_eq!(
                allowed,
                actions.len(),
                "{name}: user-42 may write its topics"
            );
            group.bench_function(format!("{name}/{size}"), |b| {
                b.iter(|| {
                    let mut allowed = 0usize;
                    authorizer.authorize_each(
                        black_box(&context),
                        black_box(actions),
                        &mut |_, a| allowed += usize::from(a.is_allowed()),
                    );
                    black_box(allowed)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
