use super::*;
use std::io::Write;

const GOOD: &str = r#"[node]
id = 1
data_dir = "data"

[listener]
address = "127.0.0.1:9092"
advertised_host = "localhost"
broker_port_base = 9100
sasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]

[upstream]
bootstrap_servers = ["127.0.0.1:19092"]
"#;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// Each test that touches the environment uses its own prefix, so tests running in parallel
/// never see each other's variables.
fn load_env(text: &str, prefix: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    for (k, v) in vars {
        std::env::set_var(format!("{prefix}{k}"), v);
    }
    let f = file(text);
    let result = load_with_env_prefix(f.path(), prefix);
    for (k, _) in vars {
        std::env::remove_var(format!("{prefix}{k}"));
    }
    result
}

fn parse(text: &str) -> Config {
    toml::from_str(text).unwrap()
}

fn invalid_key(config: &Config) -> String {
    match config.validate() {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("expected an invalid key, got {other:?}"),
    }
}

#[test]
fn loads_a_good_file_with_defaults() {
    let config = load_env(GOOD, "PCT_GOOD_", &[]).unwrap();
    assert_eq!(config.node.id, 1);
    assert_eq!(config.listener.name, "external");
    assert_eq!(config.listener.sasl_mechanisms, ["SCRAM-SHA-512", "PLAIN"]);
    assert_eq!(
        config.upstream.security_protocol,
        SecurityProtocol::Plaintext
    );
    assert_eq!(config.forwarding.policy, "passthrough");
    assert_eq!(config.listener.failed_authentication_delay_ms, 100);
    assert_eq!(config.upstream.connect_timeout_ms, 10_000);
}

#[test]
fn a_missing_file_is_named() {
    let err = load(Path::new("/nonexistent/portcullis.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(
        err.to_string().contains("/nonexistent/portcullis.toml"),
        "{err}"
    );
}

#[test]
fn an_unknown_key_is_reported_with_its_line_and_key() {
    let text = GOOD.replace(
        "broker_port_base = 9100",
        "broker_port_base = 9100\nbogus = 1",
    );
    let err = load_env(&text, "PCT_UNKNOWN_", &[]).unwrap_err();
    match &err {
        ConfigError::File {
            line,
            column,
            key,
            message,
            ..
        } => {
            assert_eq!((*line, *column), (9, 1));
            assert_eq!(key.as_deref(), Some("listener.bogus"));
            assert!(message.contains("unknown field `bogus`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains("line 9, column 1 (`listener.bogus`)"),
        "{err}"
    );
}

#[test]
fn a_wrong_type_is_reported_with_its_line() {
    let text = GOOD.replace("broker_port_base = 9100", "broker_port_base = 70000");
    let err = load_env(&text, "PCT_TYPE_", &[]).unwrap_err();
    match err {
        ConfigError::File {
            line, key, message, ..
        } => {
            assert_eq!(line, 8);
            assert_eq!(key.as_deref(), Some("listener.broker_port_base"));
            assert!(message.contains("expected a port (1–65535)"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_syntax_error_is_reported_with_its_line() {
    let text = GOOD.replace("[upstream]", "[upstream");
    let err = load_env(&text, "PCT_SYNTAX_", &[]).unwrap_err();
    assert!(matches!(err, ConfigError::File { line: 11, .. }), "{err:?}");
}

#[test]
fn env_overrides_any_key() {
    let config = load_env(
        GOOD,
        "PCT_OVERRIDE_",
        &[
            ("LISTENER__ADDRESS", "127.0.0.1:9300"),
            (
                "UPSTREAM__BOOTSTRAP_SERVERS",
                "[127.0.0.1:9092, 127.0.0.1:9093]",
            ),
            ("FORWARDING__DENY_API_KEYS", "[20]"),
            ("CACHE", "/not/a/config/key"),
        ],
    )
    .unwrap();
    assert_eq!(config.listener.address, "127.0.0.1:9300");
    assert_eq!(
        config.upstream.bootstrap_servers,
        ["127.0.0.1:9092", "127.0.0.1:9093"]
    );
    assert_eq!(config.forwarding.deny_api_keys, [20]);
}

#[test]
fn env_can_supply_a_key_the_file_lacks() {
    let text = GOOD.replace("address = \"127.0.0.1:9092\"\n", "");
    let config = load_env(
        &text,
        "PCT_SUPPLY_",
        &[("LISTENER__ADDRESS", "127.0.0.1:9301")],
    )
    .unwrap();
    assert_eq!(config.listener.address, "127.0.0.1:9301");
    let err = load_env(&text, "PCT_SUPPLY2_", &[]).unwrap_err();
    match err {
        ConfigError::Key { key, .. } => assert_eq!(key, "listener.address"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unknown_env_key_is_rejected_by_name() {
    let err = load_env(GOOD, "PCT_ENVUNK_", &[("LISTENER__BOGUS", "1")]).unwrap_err();
    match &err {
        ConfigError::Env { var, message } => {
            assert_eq!(var, "PCT_ENVUNK_LISTENER__BOGUS");
            assert!(message.contains("unknown field"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let err = load_env(GOOD, "PCT_ENVUNK2_", &[("NOPE__X", "1")]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Env { var, .. } if var == "PCT_ENVUNK2_NOPE__X"),
        "{err:?}"
    );
}

#[test]
fn a_single_underscore_env_key_gets_a_hint() {
    let err = load_env(GOOD, "PCT_ENVHINT_", &[("LISTENER_ADDRESS", "x")]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("did you mean PCT_ENVHINT_LISTENER__ADDRESS"),
        "{text}"
    );
}

#[test]
fn a_bad_env_value_names_the_variable() {
    let err = load_env(
        GOOD,
        "PCT_ENVBAD_",
        &[("LISTENER__BROKER_PORT_BASE", "nine")],
    )
    .unwrap_err();
    match err {
        ConfigError::Env { var, message } => {
            assert_eq!(var, "PCT_ENVBAD_LISTENER__BROKER_PORT_BASE");
            assert!(message.contains("expected a port (1–65535)"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn type_errors_name_the_expected_value_in_words() {
    let err = load_env(GOOD, "PCT_WORDS1_", &[("NODE__ID", "x")]).unwrap_err();
    assert!(err.to_string().ends_with("expected an integer"), "{err}");
    let err = load_env(GOOD, "PCT_WORDS2_", &[("LIMITS__MAX_CONNECTIONS", "-1")]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("invalid value `-1`"), "{text}");
    assert!(
        text.ends_with("expected a whole number (0 or more)"),
        "{text}"
    );
    let err = load_env(GOOD, "PCT_WORDS3_", &[("LISTENER__BOGUS", "1")]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("expected one of `name`, `address`,") && !text.contains("``"),
        "{text}"
    );
    assert!(text.ends_with('`') && !text.contains("`one of"), "{text}");
}

#[test]
fn the_env_password_is_taken_verbatim_and_never_shown() {
    let text = format!(
        "{GOOD}security_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nusername = \"svc\"\n"
    );
    let config = load_env(&text, "PCT_PASS_", &[("UPSTREAM__PASSWORD", "0123")]).unwrap();
    assert_eq!(
        config.upstream.password.as_ref().map(Secret::expose),
        Some("0123")
    );
    assert!(!format!("{config:?}").contains("0123"));
}

#[test]
fn a_password_of_the_wrong_type_is_not_quoted() {
    let text = format!("{GOOD}password = 987654\n");
    let err = load_env(&text, "PCT_PASSTYPE_", &[]).unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("upstream.password"), "{shown}");
    assert!(!shown.contains("987654"), "{shown}");
}

#[test]
fn validation_requires_a_mechanism() {
    let mut c = parse(GOOD);
    c.listener.sasl_mechanisms.clear();
    assert_eq!(invalid_key(&c), "listener.sasl_mechanisms");
    c.listener.sasl_mechanisms = vec!["PLAIN".into(), "PLAIN".into()];
    assert_eq!(invalid_key(&c), "listener.sasl_mechanisms");
}

#[test]
fn validation_requires_a_socket_address() {
    let mut c = parse(GOOD);
    c.listener.address = "localhost".into();
    assert_eq!(invalid_key(&c), "listener.address");
}

#[test]
fn validation_checks_tls_files_and_ca() {
    let cert = file("cert");
    let mut c = parse(GOOD);
    c.listener.tls = Some(TlsConfig {
        cert_file: cert.path().to_owned(),
        key_file: "/nonexistent/key.pem".into(),
        client_auth: ClientAuth::None,
        ca_file: None,
    });
    assert_eq!(invalid_key(&c), "listener.tls.key_file");
    if let Some(tls) = c.listener.tls.as_mut() {
        tls.key_file = cert.path().to_owned();
        tls.client_auth = ClientAuth::Required;
    }
    assert_eq!(invalid_key(&c), "listener.tls.ca_file");
    if let Some(tls) = c.listener.tls.as_mut() {
        tls.ca_file = Some(cert.path().to_owned());
    }
    c.validate().unwrap();
}

#[test]
fn validation_of_sasl_plaintext_upstream() {
    let mut c = parse(GOOD);
    c.upstream.security_protocol = SecurityProtocol::SaslPlaintext;
    assert_eq!(invalid_key(&c), "upstream.sasl_mechanism");
    c.upstream.sasl_mechanism = Some("GSSAPI".into());
    assert_eq!(invalid_key(&c), "upstream.sasl_mechanism");
    c.upstream.sasl_mechanism = Some("SCRAM-SHA-256".into());
    assert_eq!(invalid_key(&c), "upstream.username");
    c.upstream.username = Some("svc".into());
    assert_eq!(invalid_key(&c), "upstream.password");
    c.upstream.password = Some(Secret::new("hunter2"));
    c.validate().unwrap();
    c.upstream.security_protocol = SecurityProtocol::Plaintext;
    let err = c.validate().unwrap_err();
    assert!(!format!("{err} {err:?}").contains("hunter2"));
}

#[test]
fn validation_of_bootstrap_servers() {
    let mut c = parse(GOOD);
    c.upstream.bootstrap_servers.clear();
    assert_eq!(invalid_key(&c), "upstream.bootstrap_servers");
    c.upstream.bootstrap_servers = vec!["127.0.0.1".into()];
    assert_eq!(invalid_key(&c), "upstream.bootstrap_servers");
    c.upstream.bootstrap_servers = vec!["[::1]:9092".into()];
    c.validate().unwrap();
}

#[test]
fn validation_of_deny_api_keys() {
    let mut c = parse(GOOD);
    c.forwarding.deny_api_keys = vec![20, 999];
    assert_eq!(invalid_key(&c), "forwarding.deny_api_keys");
    c.forwarding.deny_api_keys = vec![20];
    c.validate().unwrap();
}

#[test]
fn broker_ports_must_fit_u16() {
    let mut c = parse(GOOD);
    assert_eq!(c.listener.broker_port(3), Some(9103));
    assert_eq!(c.listener.broker_port(-1), None);
    c.listener.broker_port_base = 65_530;
    assert_eq!(c.listener.broker_port(5), Some(65_535));
    assert_eq!(c.listener.broker_port(6), None);
    c.listener.broker_port_base = 0;
    assert_eq!(invalid_key(&c), "listener.broker_port_base");
}

#[test]
fn keys_are_found_in_headers_and_dotted_tables() {
    let text = "[listener.tls]\ncert_file = 1\n";
    assert_eq!(key_at(text, 15).as_deref(), Some("listener.tls.cert_file"));
    assert_eq!(key_at(text, 0).as_deref(), Some("listener.tls"));
    assert_eq!(key_at("a = [\n  \"x=y\",\n]\n", 8), None);
}

#[cfg(unix)]
fn with_mode(text: &str, mode: u32) -> tempfile::NamedTempFile {
    use std::os::unix::fs::PermissionsExt;
    let f = file(text);
    std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    f
}

#[test]
fn tokens_are_disabled_without_a_secret() {
    let config = load_env(GOOD, "PCT_TOK_OFF_", &[]).unwrap();
    assert!(!config.delegation_tokens.enabled());
    assert_eq!(config.delegation_tokens.max_lifetime_ms, 604_800_000);
    assert_eq!(config.delegation_tokens.expiry_time_ms, 86_400_000);
    assert_eq!(config.delegation_tokens.expiry_check_interval_ms, 3_600_000);
}

#[cfg(unix)]
#[test]
fn a_secret_in_a_file_others_can_read_is_refused_and_never_shown() {
    let text = format!("{GOOD}\n[delegation_tokens]\nsecret = \"hunter2-token-key\"\n");
    let f = with_mode(&text, 0o644);
    let err = load_with_env_prefix(f.path(), "PCT_TOK_PERM_")
        .unwrap_err()
        .to_string();
    assert!(err.contains("chmod 600"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    let f = with_mode(&text, 0o600);
    let config = load_with_env_prefix(f.path(), "PCT_TOK_PERM_").unwrap();
    assert!(config.delegation_tokens.enabled());
    assert!(!format!("{config:?}").contains("hunter2"));
    // Group-readable: accepted with a warning.
    let f = with_mode(&text, 0o640);
    assert!(load_with_env_prefix(f.path(), "PCT_TOK_PERM_").is_ok());
}

#[test]
fn the_env_secret_is_taken_verbatim_and_needs_no_private_file() {
    let config = load_env(
        GOOD,
        "PCT_TOK_ENV_",
        &[
            ("DELEGATION_TOKENS__SECRET", "1234"),
            ("DELEGATION_TOKENS__EXPIRY_TIME_MS", "5000"),
        ],
    )
    .unwrap();
    assert_eq!(
        config.delegation_tokens.secret.as_ref().map(|s| s.expose()),
        Some("1234")
    );
    assert_eq!(config.delegation_tokens.expiry_time_ms, 5000);
    let err = load_env(GOOD, "PCT_TOK_ENV2_", &[("DELEGATION_TOKENS_SECRET", "x")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("PCT_TOK_ENV2_DELEGATION_TOKENS__SECRET"),
        "{err}"
    );
}

#[test]
fn token_settings_are_validated() {
    let mut config = parse(GOOD);
    config.delegation_tokens.expiry_time_ms = 0;
    assert_eq!(invalid_key(&config), "delegation_tokens.expiry_time_ms");
    let mut config = parse(GOOD);
    config.delegation_tokens.accept_token_without_extension = true;
    assert_eq!(
        invalid_key(&config),
        "delegation_tokens.accept_token_without_extension"
    );
    config.delegation_tokens.secret = Some(Secret::new(""));
    assert!(!config.delegation_tokens.enabled());
}

/// `[store] kind = "kafka"` with `[cluster]` whose TLS files exist.
fn kafka_store(dir: &Path, extra: &str) -> Config {
    for name in ["node.pem", "node.key", "ca.pem"] {
        std::fs::write(dir.join(name), "x").unwrap();
    }
    parse(&format!(
        "{GOOD}\n{extra}\n[store]\nkind = \"kafka\"\ncluster_id = \"edge-1\"\n\n[cluster]\n\
         listener = \"127.0.0.1:9500\"\ncert_file = \"{d}/node.pem\"\nkey_file = \
         \"{d}/node.key\"\nca_file = \"{d}/ca.pem\"\n",
        d = dir.display()
    ))
}

#[test]
fn a_kafka_store_needs_a_cluster_id_and_a_cluster_and_a_file_store_refuses_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = kafka_store(dir.path(), "");
    config.validate().unwrap();
    let mut no_id = config.clone();
    no_id.store.cluster_id = None;
    assert_eq!(invalid_key(&no_id), "store.cluster_id");
    let mut no_cluster = config.clone();
    no_cluster.cluster = None;
    assert_eq!(invalid_key(&no_cluster), "cluster");
    let mut file_store = config;
    file_store.store.kind = StoreKind::File;
    assert_eq!(invalid_key(&file_store), "cluster");
}

/// The store's librdkafka clients log in with the upstream password only: a login plugin's
/// credential could not reach them, so the combination is refused at load.
#[test]
fn a_kafka_store_refuses_an_upstream_login_plugin_but_not_the_password_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = kafka_store(dir.path(), "");
    config.upstream.security_protocol = SecurityProtocol::SaslPlaintext;
    config.upstream.sasl_mechanism = Some("PLAIN".into());
    config.upstream.username = Some("svc".into());
    config.upstream.password = Some(Secret::new("pw"));
    config.validate().unwrap();
    config.upstream.login = Some(UpstreamLoginConfig {
        plugin: "file-password".into(),
    });
    assert_eq!(invalid_key(&config), "upstream.login.plugin");
    config.upstream.login = Some(UpstreamLoginConfig {
        plugin: portcullis_plugin_login::PASSWORD_LOGIN.into(),
    });
    config.validate().unwrap();
}

/// `PORTCULLIS_STORE_KIND` (one underscore) is a mistyped `PORTCULLIS_STORE__KIND`, as for
/// every other section.
#[test]
fn mistyped_store_and_cluster_overrides_are_refused() {
    for (var, prefix) in [
        ("STORE_KIND", "PCT_STORE_"),
        ("CLUSTER_LISTENER", "PCT_CLUSTER_"),
    ] {
        match load_env(GOOD, prefix, &[(var, "x")]) {
            Err(ConfigError::Env { message, .. }) => {
                assert!(message.contains("did you mean"), "{message}")
            }
            other => panic!("{var}: {other:?}"),
        }
    }
}

#[test]
fn wasm_limits_default_per_component_and_refuse_values_out_of_range_by_key() {
    let config = parse(&format!(
        "{GOOD}\n[plugins.wasm.prefix-authorizer]\nfuel_per_call = 5000\n"
    ));
    let limits = &config.plugins.wasm["prefix-authorizer"];
    assert_eq!(limits.fuel_per_call, 5000);
    assert_eq!(limits.max_memory_bytes, 16 << 20);
    assert!(config.validate().is_ok());
    let zero_fuel = parse(&format!("{GOOD}\n[plugins.wasm.x]\nfuel_per_call = 0\n"));
    assert_eq!(invalid_key(&zero_fuel), "plugins.wasm.x.fuel_per_call");
    let tiny = parse(&format!(
        "{GOOD}\n[plugins.wasm.x]\nmax_memory_bytes = 4096\n"
    ));
    assert_eq!(invalid_key(&tiny), "plugins.wasm.x.max_memory_bytes");
    let typo = toml::from_str::<Config>(&format!("{GOOD}\n[plugins.wasm.x]\nfuel = 1\n"));
    assert!(typo
        .unwrap_err()
        .to_string()
        .contains("unknown field `fuel`"));
}
