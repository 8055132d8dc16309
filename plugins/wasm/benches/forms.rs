//! The cost of one plugin call in each of the three forms, side by side: linked in (as a built-in
//! is), through the C ABI (as a `*.so` is, created in-process from the same export entry the
//! macro writes, so only `dlopen` is missing, which costs nothing per call), and as a WASM
//! component (`examples/wasm`, built here). The plugins are the examples: the prefix authorizer
//! and the `PORTCULLIS-DEMO` mechanism, the linked and C-ABI ones re-implemented here line for
//! line. SASL is measured per exchange (`start` + its one `step`), with the component's instances
//! pooled (the default) and created per exchange (`max_idle_instances = 0`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a benchmark harness, not shipped"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "the harness builds the components with cargo and reads them, as the host would"
)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::abi::{export_services, validate_declaration, PluginExport, ABI_VERSION};
use portcullis::registry::PluginInstance;
use portcullis_plugin_api::acl::{AclOperation, ResourceType};
use portcullis_plugin_api::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis_plugin_api::principal::Principal;
use portcullis_plugin_api::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};
use portcullis_plugin_api::{Host, NoConfig, Plugin, PluginError};
use portcullis_plugin_wasm::{load_component, WasmLimits, WasmPlugin, WasmRuntime};

#[path = "../tests/support/mod.rs"]
mod support;

/// `examples/prefix-authorizer` with the default separator.
struct Prefix;

impl Plugin for Prefix {
    const NAME: &'static str = "prefix-authorizer";
    type Config = NoConfig;
    fn new(_: NoConfig, _: &Host) -> Result<Self, PluginError> {
        Ok(Prefix)
    }
}

impl Authorizer for Prefix {
    fn authorize(
        &self,
        context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        actions
            .iter()
            .map(|action| {
                let own = action
                    .resource
                    .name
                    .strip_prefix(context.principal.name.as_str())
                    .is_some_and(|rest| rest.starts_with('.'));
                if action.resource.resource_type != ResourceType::Topic || own {
                    Authorization::allowed(DecidingRule::DefaultAllow)
                } else {
                    Authorization::denied(DecidingRule::DefaultDeny)
                }
            })
            .collect()
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

/// `examples/custom-mechanism` with one user.
struct Demo(Arc<BTreeMap<String, String>>);

impl Plugin for Demo {
    const NAME: &'static str = "PORTCULLIS-DEMO";
    type Config = NoConfig;
    fn new(_: NoConfig, _: &Host) -> Result<Self, PluginError> {
        Ok(Demo(Arc::new(BTreeMap::from([(
            "alice".to_owned(),
            "s3cr3t".to_owned(),
        )]))))
    }
}

impl SaslMechanism for Demo {
    fn name(&self) -> &str {
        "PORTCULLIS-DEMO"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(DemoExchange(Arc::clone(&self.0)))
    }
}

struct DemoExchange(Arc<BTreeMap<String, String>>);

impl SaslExchange for DemoExchange {
    fn step(&mut self, message: &[u8]) -> StepOutcome {
        let mut parts = message.splitn(2, |&b| b == 0);
        let user = parts.next().and_then(|u| std::str::from_utf8(u).ok());
        match (user, parts.next()) {
            (Some(user), Some(token))
                if self.0.get(user).is_some_and(|t| {
                    portcullis_plugin_api::secret::constant_time_eq(t.as_bytes(), token)
                }) =>
            {
                StepOutcome::Complete(Authenticated::new(user))
            }
            _ => StepOutcome::Fail(AuthFailure::Visible("Invalid username or token".to_owned())),
        }
    }
}

fn over_abi(export: PluginExport) -> PluginInstance {
    let exports: &'static [PluginExport] = Box::leak(Box::new([export]));
    let declaration = Box::leak(Box::new(portcullis::abi::__private::declaration(
        exports,
        ABI_VERSION,
    )));
    // SAFETY: a declaration made by the plugin API in this process.
    let library = unsafe { validate_declaration(declaration) }.unwrap();
    let services = export_services(Host::detached().services().clone());
    library.exports()[0].create("", services).unwrap()
}

fn wasm(file: &str, name: &str, config: &str, limits: WasmLimits) -> WasmPlugin {
    let runtime = WasmRuntime::new().unwrap();
    let path = support::components().join(format!("{file}.wasm"));
    let bytes = std::fs::read(&path).unwrap();
    load_component(
        &runtime,
        &path,
        &bytes,
        name,
        config,
        &limits,
        Host::detached(),
    )
    .unwrap()
    .plugin
}

fn authorizers() -> Vec<(&'static str, Arc<dyn Authorizer>)> {
    let abi = match over_abi(portcullis::abi::__private::authorizer::<Prefix>()) {
        PluginInstance::Authorizer(a) => a,
        _ => panic!("not an authorizer"),
    };
    let WasmPlugin::Authorizer(component) = wasm(
        "wasm_authorizer",
        "prefix-authorizer",
        "",
        WasmLimits::default(),
    ) else {
        panic!("not an authorizer")
    };
    vec![
        ("linked", Arc::new(Prefix) as Arc<dyn Authorizer>),
        ("c-abi", abi),
        ("wasm", component),
    ]
}

fn mechanisms() -> Vec<(&'static str, Arc<dyn SaslMechanism>)> {
    let abi = match over_abi(portcullis::abi::__private::sasl_mechanism::<Demo>()) {
        PluginInstance::SaslMechanism(m) => m,
        _ => panic!("not a mechanism"),
    };
    let config = "[tokens]\nalice = \"s3cr3t\"\n";
    let component = |limits| match wasm("wasm_mechanism", "PORTCULLIS-DEMO", config, limits) {
        WasmPlugin::SaslMechanism(m) => m,
        _ => panic!("not a mechanism"),
    };
    let per_exchange = WasmLimits {
        max_idle_instances: 0,
        ..WasmLimits::default()
    };
    vec![
        (
            "linked",
            Arc::new(Demo::new(NoConfig {}, &Host::detached()).unwrap()) as Arc<dyn SaslMechanism>,
        ),
        ("c-abi", abi),
        ("wasm-pooled", component(WasmLimits::default())),
        ("wasm-instance-per-exchange", component(per_exchange)),
    ]
}

fn bench(c: &mut Criterion) {
    let principal = Principal::user("alice");
    let context = RequestContext::new(
        &principal,
        IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        "external",
        0,
        9,
        7,
    )
    .with_client_id(Some("producer-1"));
    let one = [Action::new(
        AclOperation::Write,
        ResourceType::Topic,
        "alice.orders",
    )];
    let eight: Vec<Action<'_>> = (0..8)
        .map(|i| {
            Action::new(
                AclOperation::Read,
                ResourceType::Topic,
                format!("alice.topic-{i}"),
            )
        })
        .collect();
    for (form, authorizer) in authorizers() {
        for (n, actions) in [("1 action", &one[..]), ("8 actions", &eight[..])] {
            c.bench_function(&format!("authorize/{form}/{n}"), |b| {
                b.iter(|| {
                    let mut allowed = 0;
                    authorizer.authorize_each(&context, black_box(actions), &mut |_, a| {
                        allowed += usize::from(a.is_allowed())
                    });
                    assert_eq!(allowed, actions.len());
                })
            });
        }
    }
    let start = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "external", 0);
    for (form, mechanism) in mechanisms() {
        c.bench_function(&format!("sasl-exchange/{form}"), |b| {
            b.iter(|| {
                let mut exchange = mechanism.start(&start);
                let outcome = exchange.step(black_box(b"alice\0s3cr3t"));
                assert!(matches!(outcome, StepOutcome::Complete(_)));
            })
        });
    }
}

criterion_group! {
    name = forms;
    config = Criterion::default().warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(forms);
