//! The example components (built here for wasm32-wasip2 from `examples/wasm`) behave like their
//! C-ABI twins, and the misbehaving ones — a trap, an endless loop, unbounded memory, a short
//! answer — fail exactly that call closed, are counted, and leave the plugin serving the next
//! call. Malformed files and components of another shape are refused with a reason.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "the test builds the components with cargo and writes and reads its files, as the host would"
)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

mod support;
use support::components;

use portcullis_plugin_api::acl::{AclOperation, ResourceType};
use portcullis_plugin_api::authorizer::{
    Action, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis_plugin_api::principal::Principal;
use portcullis_plugin_api::sasl::{AuthFailure, ExchangeContext, SaslMechanism, StepOutcome};
use portcullis_plugin_api::Host;
use portcullis_plugin_wasm::{
    load_component, FailureKind, LoadedComponent, WasmError, WasmLimits, WasmPlugin, WasmRuntime,
};

fn runtime() -> &'static WasmRuntime {
    static RUNTIME: OnceLock<WasmRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| WasmRuntime::new().expect("an engine"))
}

fn load(
    file: &str,
    name: &str,
    config: &str,
    limits: &WasmLimits,
) -> Result<LoadedComponent, WasmError> {
    let path = components().join(format!("{file}.wasm"));
    let bytes = std::fs::read(&path).unwrap();
    load_component(
        runtime(),
        &path,
        &bytes,
        name,
        config,
        limits,
        Host::detached(),
    )
}

fn authorizer(loaded: &LoadedComponent) -> Arc<dyn Authorizer> {
    match &loaded.plugin {
        WasmPlugin::Authorizer(a) => Arc::clone(a),
        other => panic!("not an authorizer: {other:?}"),
    }
}

fn mechanism(loaded: &LoadedComponent) -> Arc<dyn SaslMechanism> {
    match &loaded.plugin {
        WasmPlugin::SaslMechanism(m) => Arc::clone(m),
        other => panic!("not a mechanism: {other:?}"),
    }
}

fn context(user: &str) -> RequestContext<'static> {
    RequestContext::new(
        Principal::user(user),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "client",
        0,
        9,
        7,
    )
}

fn decisions(
    authorizer: &dyn Authorizer,
    user: &str,
    topics: &[&str],
) -> Vec<(Decision, DecidingRule)> {
    let actions: Vec<Action<'_>> = topics
        .iter()
        .map(|t| Action::new(AclOperation::Write, ResourceType::Topic, *t))
        .collect();
    authorizer
        .authorize(&context(user), &actions)
        .into_iter()
        .map(|a| (a.decision, a.rule))
        .collect()
}

fn exchange(mechanism: &dyn SaslMechanism, token: &[u8]) -> StepOutcome {
    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "client", 0);
    mechanism.start(&context).step(token)
}

// ---- The examples ---------------------------------------------------------------------------

#[test]
fn the_prefix_authorizer_gives_each_principal_its_own_topics() {
    let loaded = load(
        "wasm_authorizer",
        "prefix-authorizer",
        "",
        &WasmLimits::default(),
    )
    .unwrap();
    let authorizer = authorizer(&loaded);
    let rule = DecidingRule::Plugin {
        plugin: "prefix-authorizer".into(),
    };
    assert_eq!(
        decisions(
            &*authorizer,
            "alice",
            &["alice.orders", "bob.orders", "alice"]
        ),
        [
            (Decision::Allowed, rule.clone()),
            (Decision::Denied, rule.clone()),
            (Decision::Denied, rule.clone()),
        ]
    );
    let group = Action::new(AclOperation::Read, ResourceType::Group, "anything");
    assert!(authorizer.authorize(&context("bob"), &[group])[0].is_allowed());
    assert_eq!(
        authorizer.authorize_by_resource_type(
            &context("bob"),
            AclOperation::Write,
            ResourceType::Topic
        ),
        Decision::Allowed
    );
    // Its table is read: another separator.
    let dashed = load(
        "wasm_authorizer",
        "prefix-authorizer",
        "separator = \"-\"\n",
        &WasmLimits::default(),
    )
    .unwrap();
    assert_eq!(
        decisions(&*authorizer_of(&dashed), "alice", &["alice-x", "alice.x"])
            .iter()
            .map(|d| d.0)
            .collect::<Vec<_>>(),
        [Decision::Allowed, Decision::Denied]
    );
}

fn authorizer_of(loaded: &LoadedComponent) -> Arc<dyn Authorizer> {
    authorizer(loaded)
}

#[test]
fn a_refused_table_refuses_the_plugin_with_the_components_message() {
    let error = load(
        "wasm_authorizer",
        "prefix-authorizer",
        "separator = \"\"\n",
        &WasmLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(&error, WasmError::Refused { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "plugin prefix-authorizer refused its configuration: separator: must not be empty"
    );
    let error = load(
        "wasm_mechanism",
        "PORTCULLIS-DEMO",
        "",
        &WasmLimits::default(),
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("missing field `tokens`"),
        "{error}"
    );
}

#[test]
fn the_demo_mechanism_checks_the_users_token() {
    let config = "[tokens]\nalice = \"s3cr3t\"\n";
    let loaded = load(
        "wasm_mechanism",
        "PORTCULLIS-DEMO",
        config,
        &WasmLimits::default(),
    )
    .unwrap();
    let mechanism = mechanism(&loaded);
    assert_eq!(mechanism.name(), "PORTCULLIS-DEMO");
    match exchange(&*mechanism, b"alice\0s3cr3t") {
        StepOutcome::Complete(done) => assert_eq!(done.authorization_id, "alice"),
        other => panic!("{other:?}"),
    }
    for wrong in [&b"alice\0nope"[..], b"bob\0s3cr3t", b"alice", b""] {
        match exchange(&*mechanism, wrong) {
            StepOutcome::Fail(AuthFailure::Visible(m)) => {
                assert_eq!(m, "Invalid username or token")
            }
            other => panic!("{other:?}"),
        }
    }
    // Many exchanges at once each hold an instance of their own.
    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "client", 0);
    let mut open: Vec<_> = (0..20).map(|_| mechanism.start(&context)).collect();
    for exchange in &mut open {
        assert!(matches!(
            exchange.step(b"alice\0s3cr3t"),
            StepOutcome::Complete(_)
        ));
    }
}

// ---- Failing closed -------------------------------------------------------------------------

/// A small fuel budget and memory cap, so the endless loop and the allocation stop quickly.
fn tight() -> WasmLimits {
    WasmLimits {
        fuel_per_call: 2_000_000,
        max_memory_bytes: 8 << 20,
        ..WasmLimits::default()
    }
}

#[test]
fn a_misbehaving_authorizer_denies_that_request_and_keeps_serving() {
    for (mode, kind) in [
        ("trap", FailureKind::Trap),
        ("loop", FailureKind::Timeout),
        ("grow", FailureKind::Memory),
        ("short", FailureKind::BadAnswer),
    ] {
        let config = format!("mode = \"{mode}\"\n");
        let loaded = load(
            "wasm_misbehaving_authorizer",
            "misbehaving",
            &config,
            &tight(),
        )
        .unwrap();
        let authorizer = authorizer(&loaded);
        for round in 1..=3 {
            assert_eq!(
                decisions(&*authorizer, "alice", &["ok.fine", "orders"]),
                [
                    (Decision::Denied, DecidingRule::Failed),
                    (Decision::Denied, DecidingRule::Failed)
                ],
                "{mode}, round {round}"
            );
            assert_eq!(loaded.stats.failures(kind), round, "{mode}");
            // The next request is asked again, on a fresh instance, and answered.
            assert!(
                decisions(&*authorizer, "alice", &["ok.fine"])[0].0 == Decision::Allowed,
                "{mode}"
            );
        }
        for other in [
            FailureKind::Trap,
            FailureKind::Timeout,
            FailureKind::Memory,
            FailureKind::BadAnswer,
        ] {
            if other != kind {
                assert_eq!(loaded.stats.failures(other), 0, "{mode}: {other}");
            }
        }
    }
}

#[test]
fn a_misbehaving_mechanism_fails_that_authentication_and_keeps_serving() {
    for (mode, kind) in [
        ("trap", FailureKind::Trap),
        ("loop", FailureKind::Timeout),
        ("grow", FailureKind::Memory),
    ] {
        let config = format!("mode = \"{mode}\"\n");
        let loaded = load(
            "wasm_misbehaving_mechanism",
            "X-MISBEHAVING",
            &config,
            &tight(),
        )
        .unwrap();
        let mechanism = mechanism(&loaded);
        for round in 1..=2 {
            match exchange(&*mechanism, b"user\0token") {
                StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
                    assert_eq!(
                        reason,
                        format!("wasm plugin X-MISBEHAVING failed closed: {kind}")
                    )
                }
                other => panic!("{mode}: {other:?}"),
            }
            assert_eq!(loaded.stats.failures(kind), round, "{mode}");
            assert!(
                matches!(exchange(&*mechanism, b"ok"), StepOutcome::Complete(_)),
                "{mode}"
            );
        }
    }
}

// ---- Refusals -------------------------------------------------------------------------------

fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wasm-sandbox");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn refusal(name: &str, bytes: &[u8]) -> WasmError {
    let path = scratch(name, bytes);
    load_component(
        runtime(),
        &path,
        bytes,
        "x",
        "",
        &WasmLimits::default(),
        Host::detached(),
    )
    .unwrap_err()
}

#[test]
fn files_that_are_not_plugin_components_are_refused_with_the_reason() {
    let garbage = refusal("garbage.wasm", b"not wasm at all");
    assert!(matches!(garbage, WasmError::Compile { .. }), "{garbage:?}");
    let core = refusal("core.wasm", &wat::parse_str("(module)").unwrap());
    assert!(matches!(core, WasmError::Compile { .. }), "{core:?}");
    let empty = refusal("empty.wasm", &wat::parse_str("(component)").unwrap());
    assert!(
        matches!(empty, WasmError::NoPluginExport { .. }),
        "{empty:?}"
    );
    assert!(
        empty
            .to_string()
            .contains("exports neither portcullis:plugin/authorizer@0.2.0"),
        "{empty}"
    );
    // The authorizer interface with an `init` that takes nothing.
    let wrong = wat::parse_str(
        r#"(component
            (core module $m (func (export "init")))
            (core instance $i (instantiate $m))
            (func $init (canon lift (core func $i "init")))
            (instance $e (export "init" (func $init)))
            (export "portcullis:plugin/authorizer@0.2.0" (instance $e)))"#,
    )
    .unwrap();
    let wrong = refusal("wrong.wasm", &wrong);
    assert!(matches!(wrong, WasmError::Link { .. }), "{wrong:?}");
    let empty_file = refusal("empty-file.wasm", b"");
    assert!(
        matches!(empty_file, WasmError::Compile { .. }),
        "{empty_file:?}"
    );
}

/// Host services that keep what the plugin logs (the event-log component's output).
#[derive(Default)]
struct CapturedLog {
    lines: std::sync::Mutex<Vec<String>>,
}

impl portcullis_plugin_api::host::HostServices for CapturedLog {
    fn log(&self, _level: portcullis_plugin_api::Level, message: &str) {
        self.lines.lock().unwrap().push(message.to_owned());
    }
    fn now_ms(&self) -> i64 {
        1_767_225_600_000 // 2026-01-01
    }
    fn credentials(&self) -> Arc<dyn portcullis_plugin_api::credentials::CredentialView> {
        Host::detached().credentials()
    }
    fn tokens(&self) -> Arc<dyn portcullis_plugin_api::credentials::TokenView> {
        Host::detached().tokens()
    }
    fn publish_metric(
        &self,
        _kind: portcullis_plugin_api::host::MetricKind,
        _name: &str,
        _value: f64,
    ) {
    }
}

/// `file` loaded as plugin `name` with the default limits, its log lines kept.
fn load_logging(file: &str, name: &str, config: &str) -> (LoadedComponent, Arc<CapturedLog>) {
    let captured = Arc::new(CapturedLog::default());
    let path = components().join(format!("{file}.wasm"));
    let loaded = load_component(
        runtime(),
        &path,
        &std::fs::read(&path).unwrap(),
        name,
        config,
        &WasmLimits::default(),
        Host::new(Arc::clone(&captured) as Arc<dyn portcullis_plugin_api::host::HostServices>),
    )
    .unwrap();
    (loaded, captured)
}

/// An authorizer learns the principal as an argument and every other fact of the request by
/// asking the host through its `request-context` handle: each answer is the request's own.
#[test]
fn an_authorizer_asking_about_the_request_gets_each_fact_of_it() {
    let (loaded, captured) = load_logging(
        "wasm_misbehaving_authorizer",
        "describe",
        "mode = \"describe\"\n",
    );
    let authorizer = authorizer(&loaded);
    let group = |name: &str| Principal {
        kind: "Group".into(),
        name: name.into(),
    };
    let groups = [group("ops"), group("dev")];
    let scopes = ["kafka.read".to_owned(), "kafka.write".to_owned()];
    let with_token = RequestContext::new(
        Principal::user("alice"),
        "::ffff:10.1.2.3".parse().unwrap(),
        "internal",
        3,
        12,
        -5,
    )
    .with_client_id(Some("orders-app"))
    .with_groups(&groups[..])
    .with_scopes(&scopes[..])
    .with_jti(Some("token-7"));
    let actions = [
        Action::new(AclOperation::Read, ResourceType::Topic, "payments"),
        Action::new(AclOperation::Read, ResourceType::Topic, "refunds"),
    ];
    let answer = authorizer.authorize(&with_token, &actions);
    assert!(answer.iter().all(|a| a.decision == Decision::Allowed));
    // A second request on the same (pooled) instance: nothing of the first one is left.
    let plain = context("bob");
    let answer = authorizer.authorize(&plain, &actions[..1]);
    assert_eq!(answer[0].decision, Decision::Allowed);
    // The by-resource-type question gets the same facts.
    let decision = authorizer.authorize_by_resource_type(
        &with_token,
        AclOperation::Write,
        ResourceType::Topic,
    );
    assert_eq!(decision, Decision::Allowed);
    assert_eq!(
        *captured.lines.lock().unwrap(),
        [
            "principal=User:alice address=::ffff:10.1.2.3 listener=internal api-key=3 \
             api-version=12 correlation-id=-5 client-id=Some(\"orders-app\") \
             groups=[Group:ops,Group:dev] scopes=[kafka.read,kafka.write] jti=Some(\"token-7\") \
             actions=[payments,refunds]",
            "principal=User:bob address=127.0.0.1 listener=client api-key=0 api-version=9 \
             correlation-id=7 client-id=None groups=[] scopes=[] jti=None actions=[payments]",
            "principal=User:alice address=::ffff:10.1.2.3 listener=internal api-key=3 \
             api-version=12 correlation-id=-5 client-id=Some(\"orders-app\") \
             groups=[Group:ops,Group:dev] scopes=[kafka.read,kafka.write] jti=Some(\"token-7\") \
             actions=[]",
        ]
    );
}

#[test]
fn the_principal_builder_maps_the_sasl_name_or_the_certificate_cn_and_refuses_listed_names() {
    use portcullis_plugin_api::principal::{AuthenticationContext, PrincipalError, TlsPeer};
    use portcullis_plugin_api::sasl::Authenticated;
    let loaded = load(
        "wasm_principal_mapping",
        "principal-mapping",
        "case = \"upper\"\ncertificate_cn = true\nrefuse = [\"mallory\"]\n",
        &WasmLimits::default(),
    )
    .unwrap();
    let WasmPlugin::PrincipalBuilder(builder) = &loaded.plugin else {
        panic!("not a principal builder: {:?}", loaded.plugin);
    };
    let address = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let alice = Authenticated::new("alice");
    let sasl = AuthenticationContext::sasl(&alice, "SCRAM-SHA-512", address, "client");
    assert_eq!(builder.build(&sasl).unwrap(), Principal::user("ALICE"));
    let peer = TlsPeer::new(vec![], Some("CN=svc-orders,OU=apps,O=example".into()));
    let with_cert = sasl.clone().with_tls(Some(&peer));
    assert_eq!(
        builder.build(&with_cert).unwrap(),
        Principal::user("SVC-ORDERS")
    );
    let mallory = Authenticated::new("mallory");
    let refused = AuthenticationContext::sasl(&mallory, "PLAIN", address, "client");
    assert_eq!(
        builder.build(&refused),
        Err(PrincipalError::NoRuleApplies {
            name: "mallory".into()
        })
    );
    // A table the component refuses refuses the plugin, with its message.
    let error = load(
        "wasm_principal_mapping",
        "principal-mapping",
        "case = \"title\"\n",
        &WasmLimits::default(),
    )
    .err()
    .unwrap();
    assert!(
        error.to_string().contains("not lower, upper or keep"),
        "{error}"
    );
}

#[test]
fn the_event_subscriber_gets_each_event_as_the_wit_variant() {
    use portcullis_plugin_api::credentials::CredentialId;
    use portcullis_plugin_api::events::Event;
    let (loaded, captured) = load_logging("wasm_event_log", "event-log", "");
    let WasmPlugin::EventSubscriber(subscriber) = &loaded.plugin else {
        panic!("not an event subscriber: {:?}", loaded.plugin);
    };
    let address = IpAddr::V4(Ipv4Addr::LOCALHOST);
    subscriber.on_event(&Event::SessionAuthenticated {
        principal: Principal::user("alice"),
        mechanism: "SCRAM-SHA-512".into(),
        client_address: address,
        token_claims: None,
    });
    subscriber.on_event(&Event::AuthenticationFailed {
        mechanism: None,
        client_address: address,
        reason: "Authentication failed".into(),
    });
    subscriber.on_event(&Event::AclsChanged {
        created: 2,
        deleted: 1,
    });
    subscriber.on_event(&Event::CredentialRevoked {
        credential: CredentialId::Token {
            token_id: "tok-1".into(),
        },
    });
    assert_eq!(
        *captured.lines.lock().unwrap(),
        vec![
            "event session-authenticated User:alice SCRAM-SHA-512 127.0.0.1",
            "event authentication-failed - 127.0.0.1: Authentication failed",
            "event acls-changed created=2 deleted=1",
            "event credential-revoked token tok-1",
        ]
    );
    assert_eq!(loaded.stats.failures(FailureKind::Trap), 0);
}

#[test]
fn clocks_and_random_trap_unless_granted_and_work_when_granted() {
    use portcullis_plugin_wasm::WasiGrant;
    for (mode, grant) in [("clock", WasiGrant::Clocks), ("random", WasiGrant::Random)] {
        for granted in [false, true] {
            let limits = WasmLimits {
                grant: if granted { vec![grant] } else { Vec::new() },
                ..tight()
            };
            let path = components().join("wasm_misbehaving_authorizer.wasm");
            let loaded = load_component(
                runtime(),
                &path,
                &std::fs::read(&path).unwrap(),
                "misbehaving",
                &format!("mode = \"{mode}\"\n"),
                &limits,
                Host::new(Arc::new(CapturedLog::default())),
            )
            .unwrap();
            let authorizer = authorizer(&loaded);
            let got = decisions(&*authorizer, "alice", &["orders"]);
            if granted {
                assert_eq!(got[0].0, Decision::Allowed, "{mode} granted: {got:?}");
                assert_eq!(loaded.stats.failures(FailureKind::Trap), 0, "{mode}");
            } else {
                assert_eq!(got[0], (Decision::Denied, DecidingRule::Failed), "{mode}");
                assert_eq!(loaded.stats.failures(FailureKind::Trap), 1, "{mode}");
            }
        }
    }
}

#[test]
fn grants_beyond_clocks_and_random_are_refused_by_name() {
    for (text, ok) in [
        ("grant = [\"clocks\", \"random\"]", true),
        ("grant = [\"filesystem\"]", false),
        ("grant = [\"sockets\"]", false),
    ] {
        let parsed: Result<WasmLimits, _> = toml::from_str(text);
        assert_eq!(parsed.is_ok(), ok, "{text}: {parsed:?}");
        if let Err(e) = parsed {
            assert!(
                e.to_string().contains("expected `clocks` or `random`"),
                "{e}"
            );
        }
    }
}
