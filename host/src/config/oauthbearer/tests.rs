use super::super::{load_with_env_prefix, Config, ConfigError};
use super::*;
use std::io::Write;

const BASE: &str = r#"[node]
id = 1
data_dir = "data"

[listener]
address = "127.0.0.1:9092"
advertised_host = "localhost"
broker_port_base = 9100
sasl_mechanisms = ["SCRAM-SHA-512", "OAUTHBEARER"]

[upstream]
bootstrap_servers = ["127.0.0.1:19092"]
"#;

/// The issue's example, verbatim.
const ISSUE_EXAMPLE: &str = r#"
[oauthbearer]
validator = "jwks"
jwks_url = "https://idp.example/realms/kafka/protocol/openid-connect/certs"
expected_issuer = "https://idp.example/realms/kafka"
expected_audience = ["kafka"]
allowed_urls = ["https://idp.example/"]
sub_claim_name = "sub"
scope_claim_name = "scope"
clock_skew_seconds = 30
"#;

fn load(text: &str, prefix: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    for (k, v) in vars {
        std::env::set_var(format!("{prefix}{k}"), v);
    }
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    let result = load_with_env_prefix(f.path(), prefix);
    for (k, _) in vars {
        std::env::remove_var(format!("{prefix}{k}"));
    }
    result
}

fn with(section: &str) -> String {
    format!("{BASE}\n[oauthbearer]\n{section}")
}

/// The key an invalid configuration names.
fn refused_key(text: &str) -> (String, String) {
    let config: Config = toml::from_str(text).unwrap();
    match config.validate() {
        Err(ConfigError::Invalid { key, message }) => (key, message),
        other => panic!("expected an invalid key, got {other:?}"),
    }
}

#[test]
fn the_issue_example_loads_unchanged_with_the_defaults() {
    let config = load(&format!("{BASE}{ISSUE_EXAMPLE}"), "PCT_OAUTH_OK_", &[]).unwrap();
    let o = config.oauthbearer.unwrap();
    assert_eq!(o.validator, ValidatorKind::Jwks);
    assert_eq!(o.expected_audience, ["kafka"]);
    assert_eq!(o.clock_skew_ms(), 30_000);
    assert_eq!(o.jwks_refresh_ms, 3_600_000);
    assert_eq!(o.jwks_retry_backoff_ms, 100);
    assert_eq!(o.jwks_retry_backoff_max_ms, 10_000);
    assert_eq!(o.jwks_kid_refresh_min_interval_ms, 10_000);
    assert_eq!(o.http_timeout_ms, 10_000);
    assert!(!o.allow_unsecured);
    assert!(o.groups_claim_name.is_none());
}

#[test]
fn oauthbearer_and_the_table_go_together() {
    let (key, message) = refused_key(BASE);
    assert_eq!(key, "listener.sasl_mechanisms");
    assert!(message.contains("[oauthbearer]"), "{message}");
    let without = BASE.replace(", \"OAUTHBEARER\"", "");
    let (key, message) = refused_key(&format!("{without}{ISSUE_EXAMPLE}"));
    assert_eq!(key, "oauthbearer");
    assert!(message.contains("does not enable OAUTHBEARER"), "{message}");
}

#[test]
fn every_url_must_be_allowed_and_the_error_names_its_key() {
    for (key, section) in [
            (
                "oauthbearer.jwks_url",
                "jwks_url = \"https://idp.example.evil/certs\"\nallowed_urls = [\"https://idp.example\"]",
            ),
            (
                "oauthbearer.jwks_url",
                "jwks_url = \"https://idp.example/certs\"",
            ),
            (
                "oauthbearer.discovery_url",
                "discovery_url = \"https://other.example/.well-known/openid-configuration\"\nallowed_urls = [\"https://idp.example/\"]",
            ),
            (
                "oauthbearer.introspection_url",
                "validator = \"introspection\"\nintrospection_url = \"http://169.254.169.254/latest\"\nintrospection_client_id = \"p\"\nintrospection_client_secret = \"s\"\nallowed_urls = [\"https://idp.example/\"]",
            ),
            (
                "oauthbearer.jwks_url",
                "jwks_url = \"file:/etc/passwd\"\nallowed_urls = [\"https://idp.example/\"]",
            ),
        ] {
            let (got, message) = refused_key(&with(section));
            assert_eq!(got, key, "{section}: {message}");
            assert!(message.contains("allowed_urls"), "{message}");
        }
    // An empty list refuses every URL and says what to do.
    let (_, message) = refused_key(&with("jwks_url = \"https://idp.example/certs\""));
    assert!(message.contains("the list is empty"), "{message}");
}

#[test]
fn file_key_sets_are_allowed_when_listed() {
    let text = with(
        "jwks_url = \"file:/etc/portcullis/jwks.json\"\nallowed_urls = [\"file:/etc/portcullis/\"]",
    );
    let config: Config = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    // …but only the key set may be a file.
    let (key, message) = refused_key(&with(
            "discovery_url = \"file:/etc/portcullis/openid\"\nallowed_urls = [\"file:/etc/portcullis/\"]",
        ));
    assert_eq!(key, "oauthbearer.discovery_url");
    assert!(message.contains("only jwks_url"), "{message}");
}

#[test]
fn allowed_urls_entries_must_be_urls() {
    for entry in ["idp.example/", "ftp://idp.example/", ""] {
        let (key, _) = refused_key(&with(&format!(
            "jwks_url = \"https://idp.example/certs\"\nallowed_urls = [\"{entry}\"]"
        )));
        assert_eq!(key, "oauthbearer.allowed_urls", "{entry:?}");
    }
}

#[test]
fn unsecured_needs_allow_unsecured() {
    let (key, message) = refused_key(&with("validator = \"unsecured\""));
    assert_eq!(key, "oauthbearer.validator");
    assert!(message.contains("allow_unsecured = true"), "{message}");
    let text = with("validator = \"unsecured\"\nallow_unsecured = true");
    let config: Config = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    let (key, _) = refused_key(&with(
            "jwks_url = \"https://idp.example/c\"\nallowed_urls = [\"https://idp.example/\"]\nallow_unsecured = true",
        ));
    assert_eq!(key, "oauthbearer.allow_unsecured");
    let (key, _) = refused_key(&with(
            "validator = \"unsecured\"\nallow_unsecured = true\njwks_url = \"https://idp.example/c\"\nallowed_urls = [\"https://idp.example/\"]",
        ));
    assert_eq!(key, "oauthbearer.jwks_url");
}

#[test]
fn each_validator_names_what_it_lacks() {
    let (key, _) = refused_key(&with("allowed_urls = [\"https://idp.example/\"]"));
    assert_eq!(key, "oauthbearer.jwks_url");
    let intro = "validator = \"introspection\"\nallowed_urls = [\"https://idp.example/\"]\n";
    let (key, _) = refused_key(&with(intro));
    assert_eq!(key, "oauthbearer.introspection_url");
    let intro = format!("{intro}introspection_url = \"https://idp.example/introspect\"\n");
    let (key, _) = refused_key(&with(&intro));
    assert_eq!(key, "oauthbearer.introspection_client_id");
    let intro = format!("{intro}introspection_client_id = \"portcullis\"\n");
    let (key, message) = refused_key(&with(&intro));
    assert_eq!(key, INTROSPECTION_SECRET_KEY);
    assert!(message.contains("PORTCULLIS_OAUTHBEARER__INTROSPECTION_CLIENT_SECRET"));
    // Keys of another validator are refused, not ignored.
    let (key, _) = refused_key(&with(
            "jwks_url = \"https://idp.example/c\"\nallowed_urls = [\"https://idp.example/\"]\nintrospection_client_id = \"x\"",
        ));
    assert_eq!(key, "oauthbearer.introspection_client_id");
    let (key, _) = refused_key(&with(&format!(
        "{intro}introspection_client_secret = \"s\"\njwks_url = \"https://idp.example/c\""
    )));
    assert_eq!(key, "oauthbearer.jwks_url");
}

#[test]
fn numbers_and_names_are_checked_by_key() {
    let good = "jwks_url = \"https://idp.example/c\"\nallowed_urls = [\"https://idp.example/\"]\n";
    for (extra, key) in [
        ("jwks_refresh_ms = 0", "oauthbearer.jwks_refresh_ms"),
        (
            "jwks_retry_backoff_ms = 0",
            "oauthbearer.jwks_retry_backoff_ms",
        ),
        (
            "jwks_retry_backoff_ms = 500\njwks_retry_backoff_max_ms = 100",
            "oauthbearer.jwks_retry_backoff_max_ms",
        ),
        ("http_timeout_ms = 0", "oauthbearer.http_timeout_ms"),
        (
            "clock_skew_seconds = 100000",
            "oauthbearer.clock_skew_seconds",
        ),
        ("sub_claim_name = \" \"", "oauthbearer.sub_claim_name"),
        ("scope_claim_name = \"\"", "oauthbearer.scope_claim_name"),
        ("groups_claim_name = \"\"", "oauthbearer.groups_claim_name"),
        ("expected_issuer = \"\"", "oauthbearer.expected_issuer"),
        (
            "expected_audience = [\"kafka\", \"\"]",
            "oauthbearer.expected_audience",
        ),
        ("required_scopes = [\"\"]", "oauthbearer.required_scopes"),
        (
            "required_claims = { \"\" = 1 }",
            "oauthbearer.required_claims",
        ),
        ("ca_file = \"/nonexistent/ca.pem\"", "oauthbearer.ca_file"),
    ] {
        let (got, message) = refused_key(&with(&format!("{good}{extra}")));
        assert_eq!(got, key, "{extra}: {message}");
    }
}

#[test]
fn an_unknown_key_is_reported_with_its_line() {
    let text = format!("{BASE}{ISSUE_EXAMPLE}jwks_uri = \"x\"\n");
    let err = load(&text, "PCT_OAUTH_UNKNOWN_", &[]).unwrap_err();
    match &err {
        ConfigError::File { key, message, .. } => {
            assert_eq!(key.as_deref(), Some("oauthbearer.jwks_uri"));
            assert!(message.contains("unknown field `jwks_uri`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let text = format!("{BASE}{}", ISSUE_EXAMPLE.replace("\"jwks\"", "\"hmac\""));
    let err = load(&text, "PCT_OAUTH_KIND2_", &[]).unwrap_err();
    assert!(err.to_string().contains("oauthbearer.validator"), "{err}");
}

#[test]
fn the_client_secret_comes_verbatim_from_the_environment_and_is_never_shown() {
    let text = with(
        "validator = \"introspection\"\nintrospection_url = \"https://idp.example/introspect\"\n\
             introspection_client_id = \"portcullis\"\nallowed_urls = [\"https://idp.example/\"]\n",
    );
    let config = load(
        &text,
        "PCT_OAUTH_SECRET_",
        &[("OAUTHBEARER__INTROSPECTION_CLIENT_SECRET", "0123")],
    )
    .unwrap();
    let o = config.oauthbearer.unwrap();
    assert_eq!(
        o.introspection_client_secret.as_ref().map(Secret::expose),
        Some("0123")
    );
    assert!(!format!("{o:?}").contains("0123"));
    // A secret of the wrong type is refused without its value.
    let err = load(
        &format!("{text}introspection_client_secret = 98765\n"),
        "PCT_OAUTH_SECRET2_",
        &[],
    )
    .unwrap_err();
    assert!(!err.to_string().contains("98765"), "{err}");
    // Without the variable the secret is required.
    let err = load(&text, "PCT_OAUTH_SECRET3_", &[]).unwrap_err();
    assert!(err.to_string().contains(INTROSPECTION_SECRET_KEY), "{err}");
}

#[test]
fn a_mistyped_oauthbearer_variable_gets_a_hint() {
    let err = load(
        &format!("{BASE}{ISSUE_EXAMPLE}"),
        "PCT_OAUTH_HINT_",
        &[("OAUTHBEARER_JWKS_URL", "x")],
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("did you mean PCT_OAUTH_HINT_OAUTHBEARER__JWKS_URL"),
        "{err}"
    );
}
