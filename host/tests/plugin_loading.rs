//! Loads real plugin libraries: the example crates (one plugin of each kind, the wrong-ABI library
//! and the panicking one) are built with cargo, copied into a plugin directory next to a C shared
//! library without a declaration and a file that is not a library at all, and the directory is
//! loaded the way the host does at start-up. Every kind is then used through its trait object.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

mod plugin_common;
use plugin_common::*;
use portcullis::sasl::TokenClaims;

// ---- The directory --------------------------------------------------------------------------

#[test]
fn every_library_in_the_directory_is_accounted_for() {
    let report = load();
    let mut loaded: Vec<_> = report
        .loaded
        .iter()
        .map(|p| (p.name.as_str(), p.kind))
        .collect();
    loaded.sort();
    assert_eq!(
        loaded,
        [
            ("PORTCULLIS-DEMO", PluginKind::SaslMechanism),
            ("X-PANIC", PluginKind::SaslMechanism),
            ("auth-log", PluginKind::EventSubscriber),
            ("file-password", PluginKind::LoginModule),
            ("panic-authorizer", PluginKind::Authorizer),
            ("panic-events", PluginKind::EventSubscriber),
            ("panic-login", PluginKind::LoginModule),
            ("panic-policy", PluginKind::ForwardingPolicy),
            ("panic-principal", PluginKind::PrincipalBuilder),
            ("prefix-authorizer", PluginKind::Authorizer),
            ("principal-mapping", PluginKind::PrincipalBuilder),
            ("topic-guard", PluginKind::ForwardingPolicy),
        ]
    );
    for plugin in &report.loaded {
        assert!(
            plugin.instance.is_ok(),
            "{}: {:?}",
            plugin.name,
            plugin.instance
        );
        assert_eq!(plugin.api_version, portcullis::plugin_api::API_VERSION);
        assert!(plugin.warnings.is_empty(), "{:?}", plugin.warnings);
    }
    assert_eq!(report.refused.len(), 3, "{report:#?}");
}

#[test]
fn the_bad_abi_library_is_refused_naming_the_file_and_version() {
    let report = load();
    let reason = refusal(&report, BAD_ABI);
    assert!(
        matches!(
            reason,
            RefusalReason::Abi(AbiError::AbiVersion { plugin: 1, host: 2 })
        ),
        "{reason:?}"
    );
    let message = report
        .refused
        .iter()
        .map(ToString::to_string)
        .find(|m| m.contains(&library_name(BAD_ABI)))
        .expect("a message naming the file");
    assert!(
        message.ends_with("ABI version 1, this host speaks 2"),
        "{message}"
    );
    // None of its six plugins was created.
    assert!(report.loaded.iter().all(|p| !p.name.starts_with("old-abi")));
}

#[test]
fn a_library_without_a_declaration_is_refused() {
    let report = load();
    let reason = refusal(&report, NOT_A_PLUGIN);
    assert!(matches!(reason, RefusalReason::NotAPlugin), "{reason:?}");
    assert_eq!(
        reason.to_string(),
        "not a Portcullis plugin (no PORTCULLIS_PLUGIN_DECLARATION symbol)"
    );
    let reason = refusal(&report, GARBAGE);
    assert!(matches!(reason, RefusalReason::Open(_)), "{reason:?}");
}

#[test]
fn a_missing_directory_is_an_empty_report() {
    let report = load_plugin_dir(
        &plugin_dir().join("does-not-exist"),
        &PluginTables::default(),
        &HostContext::offline(),
    );
    assert!(report.loaded.is_empty() && report.refused.is_empty());
}

// ---- Typed configuration ----------------------------------------------------------------------

#[test]
fn an_unknown_key_is_refused_with_the_plugin_the_key_and_the_line() {
    let (report, _, _) = load_with("\n[plugins.config.prefix-authorizer]\nseperator = \"-\"\n");
    let plugin = report
        .loaded
        .iter()
        .find(|p| p.name == "prefix-authorizer")
        .unwrap();
    let error = plugin.instance.as_ref().expect_err("refused");
    assert_eq!(
        error.key.as_deref(),
        Some("plugins.config.prefix-authorizer.seperator")
    );
    let line = config_text(Path::new("x"), "").lines().count() + 3;
    assert_eq!(error.position, Some((line, 1)));
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "portcullis.toml, line {line}, column 1 (`plugins.config.prefix-authorizer.seperator`): plugin prefix-authorizer: unknown field `seperator`"
        )),
        "{message}"
    );
    // The other plugins are unaffected.
    assert!(matches!(
        instance(&report, "topic-guard"),
        PluginInstance::ForwardingPolicy(_)
    ));
}

#[test]
fn a_wrong_type_and_an_unusable_value_are_refused() {
    let (report, _, _) = load_with("\n[plugins.config.prefix-authorizer]\nseparator = 7\n");
    let error = report
        .loaded
        .iter()
        .find(|p| p.name == "prefix-authorizer")
        .and_then(|p| p.instance.as_ref().err())
        .expect("refused")
        .to_string();
    assert!(
        error.contains("invalid type: integer `7`, expected a string"),
        "{error}"
    );
    assert!(
        error.contains("`plugins.config.prefix-authorizer.separator`"),
        "{error}"
    );

    let (report, _, _) = load_with("\n[plugins.config.X-PANIC]\npanic_in = \"nowhere\"\n");
    let error = report
        .loaded
        .iter()
        .find(|p| p.name == "X-PANIC")
        .and_then(|p| p.instance.as_ref().err())
        .expect("refused")
        .to_string();
    assert!(
        error.contains("(`plugins.config.X-PANIC.panic_in`)"),
        "{error}"
    );
    assert!(error.ends_with("unknown place \"nowhere\""), "{error}");
}

// ---- Each kind, through its trait object --------------------------------------------------------

#[test]
fn the_demo_mechanism_authenticates() {
    let report = load();
    let PluginInstance::SaslMechanism(demo) = instance(&report, "PORTCULLIS-DEMO") else {
        panic!("not a mechanism")
    };
    assert_eq!(demo.name(), "PORTCULLIS-DEMO");
    assert!(matches!(
        authenticate(demo.as_ref(), b"alice\0s3cr3t"),
        StepOutcome::Complete(a) if a.authorization_id == "alice"
    ));
    let invalid = AuthFailure::Visible("Invalid username or token".to_owned());
    for wrong in [
        &b"alice\0hunter2"[..],
        b"alice\0s3cr3",
        b"mallory\0s3cr3t",
        b"alice",
        b"",
    ] {
        match authenticate(demo.as_ref(), wrong) {
            StepOutcome::Fail(failure) => assert_eq!(failure, invalid, "{wrong:?}"),
            other => panic!("{wrong:?} must fail: {other:?}"),
        }
    }
    // Exchanges run concurrently on one instance.
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let demo = demo.clone();
            std::thread::spawn(move || {
                let (user, token) = if i % 2 == 0 {
                    ("alice", "s3cr3t")
                } else {
                    ("bob", "hunter2")
                };
                (0..50).all(|_| {
                    let message = format!("{user}\0{token}");
                    matches!(
                        authenticate(demo.as_ref(), message.as_bytes()),
                        StepOutcome::Complete(a) if a.authorization_id == user
                    )
                })
            })
        })
        .collect();
    for thread in threads {
        assert!(thread.join().expect("thread"));
    }
}

#[test]
fn the_prefix_authorizer_allows_only_the_principals_topics() {
    let report = load();
    let PluginInstance::Authorizer(authorizer) = instance(&report, "prefix-authorizer") else {
        panic!("not an authorizer")
    };
    let alice = Principal::user("alice");
    let actions = [
        Action::new(AclOperation::Write, ResourceType::Topic, "alice.orders"),
        Action::new(AclOperation::Write, ResourceType::Topic, "bob.orders"),
        Action::new(AclOperation::Describe, ResourceType::Topic, "aliceorders"),
        Action::new(AclOperation::Read, ResourceType::Group, "any-group"),
    ];
    let decisions: Vec<Decision> = authorizer
        .authorize(&request(&alice, 0), &actions)
        .into_iter()
        .map(|a| a.decision)
        .collect();
    assert_eq!(
        decisions,
        [
            Decision::Allowed,
            Decision::Denied,
            Decision::Denied,
            Decision::Allowed
        ]
    );
    assert!(authorizer.acl_admin().is_none());
}

#[test]
fn the_mapping_principal_builder_maps_certificates_and_sasl_names() {
    let report = load();
    let PluginInstance::PrincipalBuilder(builder) = instance(&report, "principal-mapping") else {
        panic!("not a principal builder")
    };
    let address = IpAddr::from([127, 0, 0, 1]);
    let done = Authenticated::new("alice");
    let peer = TlsPeer::new(
        vec![vec![0x30]],
        Some("CN=Svc-Orders,OU=apps,O=example".into()),
    );
    let with_cert = AuthenticationContext::sasl(&done, "PLAIN", address, "l").with_tls(Some(&peer));
    assert_eq!(
        builder.build(&with_cert).unwrap(),
        Principal::user("svc-orders")
    );
    let plain = AuthenticationContext::sasl(&done, "PLAIN", address, "l");
    assert_eq!(builder.build(&plain).unwrap(), Principal::user("alice"));
    let kerberos_like = Authenticated::new("carol@EXAMPLE");
    let context = AuthenticationContext::sasl(&kerberos_like, "PLAIN", address, "l");
    assert_eq!(builder.build(&context).unwrap(), Principal::user("carol"));
}

#[test]
fn the_file_login_hands_over_the_password_and_reads_it_again() {
    let (report, _, files) = load_with("");
    let PluginInstance::LoginModule(login) = instance(&report, "file-password") else {
        panic!("not a login module")
    };
    assert_eq!(login.mechanism(), "SCRAM-SHA-512");
    let credential = login.credential();
    assert_eq!(credential.principal_name, "svc");
    let (start, expiry) = (credential.start_ms.unwrap(), credential.expiry_ms.unwrap());
    assert_eq!(expiry - start, 5000, "expires after the check interval");
    let password = |login: &Arc<dyn LoginModule>| match login.start().unwrap() {
        ClientExchange::Password { username, password } => {
            assert_eq!(username, "svc");
            password.expose().to_owned()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(password(&login), "first");
    std::fs::write(files.join("password"), "second\r\n").unwrap();
    assert_eq!(password(&login), "first", "read again only by refresh");
    let refreshed = login.refresh().unwrap();
    assert!(refreshed.start_ms.unwrap() >= start);
    assert_eq!(password(&login), "second");
    // A missing file fails the refresh and keeps the current password.
    std::fs::remove_file(files.join("password")).unwrap();
    assert!(login
        .refresh()
        .unwrap_err()
        .to_string()
        .contains("password"));
    assert_eq!(password(&login), "second");
}

#[test]
fn the_topic_guard_refuses_produce_to_matching_topics_and_publishes_a_metric() {
    let (report, context, _) = load_with("");
    let PluginInstance::ForwardingPolicy(policy) = instance(&report, "topic-guard") else {
        panic!("not a policy")
    };
    assert!(policy.screens_actions());
    let alice = Principal::user("alice");
    assert_eq!(
        policy.route(&RequestInfo::new(0, 9, &alice)),
        Route::standard(0)
    );
    assert_eq!(policy.route(&RequestInfo::new(30, 3, &alice)), Route::Local);
    let write = |name| Action::new(AclOperation::Write, ResourceType::Topic, name);
    assert!(!policy.admits(&request(&alice, 0), &write("audit.events")));
    assert!(policy.admits(&request(&alice, 0), &write("orders")));
    // Only produce: a fetch from the same topic goes ahead.
    let read = Action::new(AclOperation::Read, ResourceType::Topic, "audit.events");
    assert!(policy.admits(&request(&alice, 1), &read));
    assert_eq!(
        context.stats().metric("topic-guard", "refused_produce"),
        Some(1.0),
        "the plugin's counter reached the host"
    );
}

#[test]
fn the_auth_log_appends_a_json_line_per_authentication_outcome() {
    let (report, _, files) = load_with("");
    let PluginInstance::EventSubscriber(subscriber) = instance(&report, "auth-log") else {
        panic!("not a subscriber")
    };
    let path = files.join("auth.jsonl");
    subscriber.on_event(&Event::SessionAuthenticated {
        principal: Principal::user("alice"),
        mechanism: "SCRAM-SHA-512".into(),
        client_address: IpAddr::from([10, 1, 2, 3]),
        token_claims: None,
    });
    subscriber.on_event(&Event::AclsChanged {
        created: 1,
        deleted: 0,
    });
    subscriber.on_event(&Event::AuthenticationFailed {
        mechanism: Some("PLAIN".into()),
        client_address: IpAddr::from([10, 1, 2, 4]),
        reason: "bad password".into(),
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["event"], "SessionAuthenticated");
    assert_eq!(lines[0]["principal"], "User:alice");
    assert_eq!(lines[0]["client"], "10.1.2.3");
    assert!(lines[0]["groups"].is_null());
    assert_eq!(lines[1]["event"], "AuthenticationFailed");
    assert_eq!(lines[1]["mechanism"], "PLAIN");

    // A bearer token's claims cross the C ABI to the library with the event.
    subscriber.on_event(&Event::SessionReauthenticated {
        principal: Principal::user("carol"),
        mechanism: "OAUTHBEARER".into(),
        client_address: IpAddr::from([10, 1, 2, 5]),
        token_claims: Some(TokenClaims::new(
            vec!["kafka.read".into()],
            vec!["readers".into(), "ops".into()],
            Some("jti-42".into()),
        )),
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "SessionReauthenticated");
    assert_eq!(last["principal"], "User:carol");
    assert_eq!(last["groups"], serde_json::json!(["readers", "ops"]));
    assert_eq!(last["jti"], "jti-42");
}

// ---- Panics are contained, kind by kind ----------------------------------------------------------

#[test]
fn a_panicking_mechanism_fails_the_exchange() {
    let report = load();
    let PluginInstance::SaslMechanism(panicking) = instance(&report, "X-PANIC") else {
        panic!()
    };
    match authenticate(panicking.as_ref(), b"panic!") {
        StepOutcome::Fail(AuthFailure::Hidden(reason)) => {
            assert!(reason.contains("test hook: panic in step"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The process is alive and the mechanism still works.
    assert!(matches!(
        authenticate(panicking.as_ref(), b"hello"),
        StepOutcome::Fail(AuthFailure::Visible(m)) if m == "send `panic!`"
    ));
    let (report, _, _) = load_with("\n[plugins.config.X-PANIC]\npanic_in = \"start\"\n");
    let PluginInstance::SaslMechanism(panicking) = instance(&report, "X-PANIC") else {
        panic!()
    };
    assert!(matches!(
        authenticate(panicking.as_ref(), b"hello"),
        StepOutcome::Fail(AuthFailure::Hidden(r)) if r.contains("failed to start")
    ));
    let (report, _, _) = load_with("\n[plugins.config.X-PANIC]\npanic_in = \"create\"\n");
    let error = report
        .loaded
        .iter()
        .find(|p| p.name == "X-PANIC")
        .and_then(|p| p.instance.as_ref().err())
        .expect("refused")
        .to_string();
    assert!(
        error.contains("panicked while creating its instance: test hook: panic in from_config"),
        "{error}"
    );
}

#[test]
fn a_panicking_authorizer_denies_that_request_only() {
    let report = load();
    let PluginInstance::Authorizer(authorizer) = instance(&report, "panic-authorizer") else {
        panic!()
    };
    let alice = Principal::user("alice");
    let answers = authorizer.authorize(
        &request(&alice, 0),
        &[
            Action::new(AclOperation::Write, ResourceType::Topic, "orders"),
            Action::new(AclOperation::Write, ResourceType::Topic, "panic-topic"),
        ],
    );
    assert!(answers
        .iter()
        .all(|a| a.decision == Decision::Denied && a.rule == DecidingRule::Failed));
    let answers = authorizer.authorize(
        &request(&alice, 0),
        &[Action::new(
            AclOperation::Write,
            ResourceType::Topic,
            "orders",
        )],
    );
    assert_eq!(answers[0].decision, Decision::Allowed);
}

#[test]
fn a_panicking_principal_builder_fails_that_authentication() {
    let report = load();
    let PluginInstance::PrincipalBuilder(builder) = instance(&report, "panic-principal") else {
        panic!()
    };
    let address = IpAddr::from([127, 0, 0, 1]);
    let panic = Authenticated::new("panic-user");
    match builder.build(&AuthenticationContext::sasl(&panic, "PLAIN", address, "l")) {
        Err(PrincipalError::Failed { reason }) => {
            assert!(reason.contains("test hook: panic in build"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let fine = Authenticated::new("alice");
    assert_eq!(
        builder
            .build(&AuthenticationContext::sasl(&fine, "PLAIN", address, "l"))
            .unwrap(),
        Principal::user("alice")
    );
}

#[test]
fn a_panicking_login_module_fails_the_login_not_the_process() {
    let report = load();
    let PluginInstance::LoginModule(login) = instance(&report, "panic-login") else {
        panic!()
    };
    assert!(login
        .start()
        .unwrap_err()
        .to_string()
        .contains("panic in start"));
    assert!(login
        .refresh()
        .unwrap_err()
        .to_string()
        .contains("panic in refresh"));
    assert_eq!(login.credential().principal_name, "panic");
}

#[test]
fn a_panicking_policy_refuses_the_request_or_the_action() {
    let report = load();
    let PluginInstance::ForwardingPolicy(policy) = instance(&report, "panic-policy") else {
        panic!()
    };
    let panicky = Principal::user("panic-user");
    assert_eq!(
        policy.route(&RequestInfo::new(0, 9, &panicky)),
        Route::Reject(ErrorCode::POLICY_VIOLATION)
    );
    let alice = Principal::user("alice");
    assert_eq!(
        policy.route(&RequestInfo::new(0, 9, &alice)),
        Route::standard(0)
    );
    let action = |name| Action::new(AclOperation::Write, ResourceType::Topic, name);
    assert!(!policy.admits(&request(&alice, 0), &action("panic-topic")));
    assert!(policy.admits(&request(&alice, 0), &action("orders")));
}

#[test]
fn a_panicking_subscriber_loses_the_event_not_the_process() {
    let report = load();
    let PluginInstance::EventSubscriber(subscriber) = instance(&report, "panic-events") else {
        panic!()
    };
    for _ in 0..3 {
        subscriber.on_event(&Event::AclsChanged {
            created: 1,
            deleted: 0,
        });
    }
}
