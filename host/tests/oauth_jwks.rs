//! OAUTHBEARER's key set, fetched by the host from a JWKS served over plain HTTP by a tiny server
//! inside the test (127.0.0.1, an ephemeral port): the start fetches it, a token naming an
//! unknown kid triggers exactly one fetch, a failing server keeps the old set, an unreachable
//! one fails the start; and the node and the binary wire it in. Real identity providers and real
//! Kafka clients are the interop tests' (tests/interop/test_oauth*.py).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use portcullis::sasl::{ExchangeContext, SaslMechanism, StepOutcome};
use portcullis_host::config::{Config, OAuthBearerConfig};
use portcullis_host::oauth::OAuthBearer;
use portcullis_plugin_oauthbearer::jwks::KeyRefresh;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

const WAIT: Duration = Duration::from_secs(10);

/// What the test server answers, and how often it was asked.
struct ServerState {
    body: String,
    status: u16,
    requests: u32,
    /// The last request: its head (request line and headers) and body.
    last: (String, String),
}

/// A one-path HTTP/1.1 server on a std thread (so it answers even while the test thread blocks
/// in `OAuthBearer::start`); every answer closes its connection.
struct JwksServer {
    address: SocketAddr,
    state: Arc<Mutex<ServerState>>,
}

impl JwksServer {
    fn start(body: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(ServerState {
            body,
            status: 200,
            requests: 0,
            last: (String::new(), String::new()),
        }));
        let served = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let state = Arc::clone(&served);
                std::thread::spawn(move || answer(stream, &state));
            }
        });
        Self { address, state }
    }

    fn url(&self) -> String {
        format!("http://{}/jwks", self.address)
    }

    fn requests(&self) -> u32 {
        self.state.lock().unwrap().requests
    }

    fn serve(&self, status: u16, body: String) {
        let mut state = self.state.lock().unwrap();
        state.status = status;
        state.body = body;
    }

    /// Waits until the server has been asked `n` times.
    fn wait_for_requests(&self, n: u32) {
        let deadline = Instant::now() + WAIT;
        while self.requests() < n {
            assert!(
                Instant::now() < deadline,
                "the server was asked {} times, not {n}",
                self.requests()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn answer(stream: TcpStream, state: &Mutex<ServerState>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut head = String::new();
    let mut length = 0;
    // The request line and headers, then the body (a POST's form).
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap();
                    }
                }
                head.push_str(&line);
            }
        }
    }
    let mut request_body = vec![0; length];
    if std::io::Read::read_exact(&mut reader, &mut request_body).is_err() {
        return;
    }
    let (status, body) = {
        let mut state = state.lock().unwrap();
        state.requests += 1;
        state.last = (head, String::from_utf8(request_body).unwrap());
        (state.status, state.body.clone())
    };
    let reason = if status == 200 { "OK" } else { "Error" };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = reader.into_inner();
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}

/// An ES256 key with its kid.
struct SigningKey {
    kid: String,
    pair: EcdsaKeyPair,
}

impl SigningKey {
    fn new(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Self {
            kid: kid.to_owned(),
            pair,
        }
    }

    fn jwk(&self) -> serde_json::Value {
        // The uncompressed point: 0x04 || x || y.
        let point = self.pair.public_key().as_ref();
        serde_json::json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }

    /// A token for `sub`, valid for an hour, naming `kid` (this key's unless given).
    fn token(&self, sub: &str, kid: Option<&str>) -> String {
        let now = now_ms() / 1000;
        let header =
            serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": kid.unwrap_or(&self.kid)});
        let claims = serde_json::json!({
            "sub": sub, "iat": now, "exp": now + 3600, "iss": "https://idp.test",
            "aud": "kafka", "scope": "kafka",
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .unwrap();
        format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        )
    }
}

fn jwks(keys: &[&SigningKey]) -> String {
    serde_json::json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// The `[oauthbearer]` table for the server, with `extra` keys.
fn section(url: &str, extra: &str) -> String {
    format!(
        r#"[oauthbearer]
validator = "jwks"
jwks_url = "{url}"
expected_issuer = "https://idp.test"
expected_audience = ["kafka"]
allowed_urls = ["http://127.0.0.1:{port}/"]
jwks_retry_backoff_ms = 10
jwks_retry_backoff_max_ms = 200
{extra}
"#,
        port = url::Url::parse(url).unwrap().port().unwrap(),
    )
}

fn oauth_config(url: &str, extra: &str) -> OAuthBearerConfig {
    let text = format!("{}{}", node_text("data", true), section(url, extra));
    let config: Config = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    config.oauthbearer.unwrap()
}

fn node_text(data: &str, oauth: bool) -> String {
    format!(
        r#"[node]
id = 1
data_dir = "{data}"

[listener]
address = "127.0.0.1:0"
advertised_host = "localhost"
broker_port_base = 9100
sasl_mechanisms = ["SCRAM-SHA-512"{}]

[upstream]
bootstrap_servers = ["127.0.0.1:19092"]

"#,
        if oauth { ", \"OAUTHBEARER\"" } else { "" }
    )
}

/// One OAUTHBEARER login with `token`: `Ok(principal)` or `Err(challenge)`.
fn login(mechanism: &dyn SaslMechanism, token: &str) -> Result<String, String> {
    let context = ExchangeContext::new([127, 0, 0, 1].into(), "test", now_ms());
    let mut exchange = mechanism.start(&context);
    let initial = format!("n,,\x01auth=Bearer {token}\x01\x01");
    match exchange.step(initial.as_bytes()) {
        StepOutcome::Complete(authenticated) => Ok(authenticated.authorization_id),
        StepOutcome::Continue(challenge) => Err(String::from_utf8(challenge).unwrap()),
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[test]
fn the_start_fetches_the_key_set_and_tokens_verify_against_it() {
    let key = SigningKey::new("k1");
    let server = JwksServer::start(jwks(&[&key]));
    let oauth = OAuthBearer::start(&oauth_config(&server.url(), "")).unwrap();
    assert_eq!(server.requests(), 1, "one fetch at start");
    let refresher = oauth.refresher().unwrap();
    assert_eq!(refresher.keys().load().kids(), ["k1"]);
    assert_eq!(oauth.mechanism().name(), "OAUTHBEARER");
    assert_eq!(
        login(&*oauth.mechanism(), &key.token("alice", None)),
        Ok("alice".to_owned())
    );
    // A token signed by another key with the same kid is refused, with Kafka's challenge.
    let impostor = SigningKey::new("k1");
    let challenge = login(&*oauth.mechanism(), &impostor.token("alice", None)).unwrap_err();
    assert!(challenge.contains("invalid_token"), "{challenge}");
    // Nothing else was fetched.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(server.requests(), 1);
    oauth.shutdown();
}

#[test]
fn an_unknown_kid_triggers_exactly_one_fetch_and_the_next_login_succeeds() {
    let old = SigningKey::new("old");
    let new = SigningKey::new("new");
    let server = JwksServer::start(jwks(&[&old]));
    let oauth = OAuthBearer::start(&oauth_config(
        &server.url(),
        "jwks_kid_refresh_min_interval_ms = 1000",
    ))
    .unwrap();
    assert_eq!(server.requests(), 1);
    // The provider rotates its keys; a token signed with the new one arrives.
    server.serve(200, jwks(&[&old, &new]));
    let token = new.token("bob", None);
    let challenge = login(&*oauth.mechanism(), &token).unwrap_err();
    assert!(challenge.contains("invalid_token"), "{challenge}");
    server.wait_for_requests(2);
    let refresher = oauth.refresher().unwrap();
    let deadline = Instant::now() + WAIT;
    while refresher.keys().load().len() < 2 {
        assert!(Instant::now() < deadline, "the new key never arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(login(&*oauth.mechanism(), &token), Ok("bob".to_owned()));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        server.requests(),
        2,
        "exactly one fetch for the unknown kid"
    );

    // A flood of tokens with random kids costs one fetch per jwks_kid_refresh_min_interval_ms.
    let before = server.requests();
    for i in 0..200 {
        let kid = format!("random-{i}-{}", now_ms());
        assert!(login(&*oauth.mechanism(), &old.token("eve", Some(&kid))).is_err());
    }
    server.wait_for_requests(before + 1);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        server.requests(),
        before + 1,
        "200 random kids within the interval: one fetch"
    );
    assert!(
        refresher
            .stats()
            .kid_requests
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    // The valid keys still work.
    assert_eq!(login(&*oauth.mechanism(), &token), Ok("bob".to_owned()));
    oauth.shutdown();
}

#[test]
fn a_failing_server_keeps_the_old_set() {
    let key = SigningKey::new("k1");
    let server = JwksServer::start(jwks(&[&key]));
    let oauth = OAuthBearer::start(&oauth_config(
        &server.url(),
        "jwks_kid_refresh_min_interval_ms = 0",
    ))
    .unwrap();
    let refresher = oauth.refresher().unwrap();
    let failed = || {
        refresher
            .stats()
            .failed
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for (status, body) in [
        (500, "{}".to_owned()),
        (200, "not json".to_owned()),
        (200, r#"{"keys":[]}"#.to_owned()),
    ] {
        server.serve(status, body);
        let before = failed();
        refresher.request_refresh("missing");
        let deadline = Instant::now() + WAIT;
        while failed() == before {
            assert!(Instant::now() < deadline, "the refresh never failed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(refresher.keys().load().kids(), ["k1"], "old set kept");
        assert_eq!(
            login(&*oauth.mechanism(), &key.token("carol", None)),
            Ok("carol".to_owned())
        );
    }
    // Retried with backoff within jwks_retry_backoff_max_ms (200 ms): the start, then at least
    // two attempts for each of the three failed refreshes.
    assert!(server.requests() >= 7, "{}", server.requests());
    // Back up: the next refresh stores the new set.
    let second = SigningKey::new("k2");
    server.serve(200, jwks(&[&key, &second]));
    refresher.request_refresh("k2");
    let deadline = Instant::now() + WAIT;
    while refresher.keys().load().len() < 2 {
        assert!(Instant::now() < deadline, "the set was never refreshed");
        std::thread::sleep(Duration::from_millis(10));
    }
    oauth.shutdown();
}

#[test]
fn the_set_is_refreshed_periodically_and_stops_on_shutdown() {
    let key = SigningKey::new("k1");
    let server = JwksServer::start(jwks(&[&key]));
    let oauth = OAuthBearer::start(&oauth_config(&server.url(), "jwks_refresh_ms = 100")).unwrap();
    server.wait_for_requests(3);
    oauth.shutdown();
    std::thread::sleep(Duration::from_millis(100));
    let after = server.requests();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(server.requests(), after, "no fetch after shutdown");
}

#[test]
fn the_start_fails_when_the_key_set_cannot_be_had() {
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/jwks");
    let started = Instant::now();
    let err = OAuthBearer::start(&oauth_config(&url, "")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("oauthbearer.jwks_url"), "{text}");
    assert!(text.contains(&url), "{text}");
    assert!(text.contains("attempt"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A server that answers something else than a usable key set fails it too.
    let server =
        JwksServer::start(r#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}"#.to_owned());
    let text = OAuthBearer::start(&oauth_config(&server.url(), ""))
        .unwrap_err()
        .to_string();
    assert!(text.contains("no usable key"), "{text}");
    let server = JwksServer::start("{}".to_owned());
    server.serve(404, "{}".to_owned());
    let text = OAuthBearer::start(&oauth_config(&server.url(), ""))
        .unwrap_err()
        .to_string();
    assert!(text.contains("HTTP status 404"), "{text}");
}

#[test]
fn discovery_fills_the_key_set_url_and_the_issuer() {
    let key = SigningKey::new("k1");
    let server = JwksServer::start(String::new());
    let base = format!("http://{}", server.address);
    // The test server answers every path with the same body: the discovery document first.
    server.serve(
        200,
        serde_json::json!({"issuer": "https://idp.test", "jwks_uri": format!("{base}/jwks")})
            .to_string(),
    );
    let text = format!(
        "{}[oauthbearer]\ndiscovery_url = \"{base}/.well-known/openid-configuration\"\n\
         expected_audience = [\"kafka\"]\nallowed_urls = [\"{base}/\"]\n",
        node_text("data", true)
    );
    let config: Config = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    let section = config.oauthbearer.unwrap();
    // Switch to the key set as soon as the document has been read.
    let switcher = {
        let state = Arc::clone(&server.state);
        let body = jwks(&[&key]);
        std::thread::spawn(move || loop {
            let mut state = state.lock().unwrap();
            if state.requests >= 1 {
                state.body = body;
                return;
            }
            drop(state);
            std::thread::sleep(Duration::from_millis(1));
        })
    };
    // The start fetches the document, then the key set; the switch may lose the race with a
    // fast start, in which case the key set fetch is retried until it has keys.
    let oauth = OAuthBearer::start(&section).unwrap();
    switcher.join().unwrap();
    let resolved = oauth.resolved();
    assert_eq!(
        resolved.jwks_url.as_ref().unwrap().as_str(),
        format!("{base}/jwks")
    );
    assert_eq!(
        resolved.expected_issuer.as_deref(),
        Some("https://idp.test")
    );
    assert_eq!(resolved.discovered, ["jwks_url", "expected_issuer"]);
    assert_eq!(
        login(&*oauth.mechanism(), &key.token("dave", None)),
        Ok("dave".to_owned())
    );
    oauth.shutdown();

    // A discovered URL outside the allow-list refuses the start, naming where it came from.
    let server = JwksServer::start(
        serde_json::json!({"issuer": "https://idp.test", "jwks_uri": "https://evil.example/jwks"})
            .to_string(),
    );
    let base = format!("http://{}", server.address);
    let text = format!(
        "{}[oauthbearer]\ndiscovery_url = \"{base}/.well-known/openid-configuration\"\n\
         allowed_urls = [\"{base}/\"]\n",
        node_text("data", true)
    );
    let config: Config = toml::from_str(&text).unwrap();
    let err = OAuthBearer::start(config.oauthbearer.as_ref().unwrap()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("oauthbearer.jwks_url (`jwks_uri` from oauthbearer.discovery_url)"),
        "{text}"
    );
    assert!(text.contains("https://evil.example/jwks"), "{text}");
}

#[test]
fn the_node_serves_oauthbearer_and_stops_its_refresher() {
    let key = SigningKey::new("k1");
    let server = JwksServer::start(jwks(&[&key]));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let text = format!(
        "{}{}",
        node_text(&data.display().to_string(), true),
        section(&server.url(), "jwks_refresh_ms = 100")
    );
    let config: Config = toml::from_str(&text).unwrap();
    let node = portcullis_host::node::Node::build(config).unwrap();
    let names: Vec<&str> = node.services.mechanisms.iter().map(|m| m.name()).collect();
    assert_eq!(names, ["SCRAM-SHA-512", "OAUTHBEARER"]);
    let oauth = node.services.mechanisms[1].clone();
    assert_eq!(
        login(&*oauth, &key.token("erin", None)),
        Ok("erin".to_owned())
    );
    server.wait_for_requests(2);
    node.shutdown_background();
    std::thread::sleep(Duration::from_millis(100));
    let after = server.requests();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.requests(), after);
    assert!(portcullis_host::node::builtin_mechanism_names().contains(&"OAUTHBEARER"));
}

#[test]
fn a_node_refuses_to_start_without_its_key_set() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}{}",
        node_text(&dir.path().join("data").display().to_string(), true),
        section(&format!("http://127.0.0.1:{port}/jwks"), "")
    );
    let config: Config = toml::from_str(&text).unwrap();
    let err = portcullis_host::node::Node::build(config).unwrap_err();
    assert!(err.to_string().contains("oauthbearer.jwks_url"), "{err}");
}

mod cli {
    use super::*;
    use std::process::Command;

    fn check_config(text: &str) -> std::process::Output {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portcullis.toml");
        std::fs::write(&path, text).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_portcullis"));
        for (key, _) in std::env::vars() {
            if key.to_ascii_uppercase().starts_with("PORTCULLIS_") {
                command.env_remove(key);
            }
        }
        command
            .args(["check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    }

    #[test]
    fn check_config_summarises_without_fetching_and_warns_about_unsecured() {
        let base = node_text("data", true);
        // Nothing listens there: check-config does not fetch.
        let o = check_config(&format!("{base}{}", section("http://127.0.0.1:9/jwks", "")));
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.contains("mechanisms:  SCRAM-SHA-512, OAUTHBEARER"),
            "{out}"
        );
        assert!(
            out.contains("oauthbearer: jwks validator (key set http://127.0.0.1:9/jwks"),
            "{out}"
        );

        let o = check_config(&format!("{base}[oauthbearer]\nvalidator = \"unsecured\"\n"));
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("oauthbearer.validator"), "{err}");
        assert!(err.contains("allow_unsecured = true"), "{err}");

        let o = check_config(&format!(
            "{base}[oauthbearer]\nvalidator = \"unsecured\"\nallow_unsecured = true\n"
        ));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("warning: oauthbearer.validator = \"unsecured\""),
            "{err}"
        );

        // The issue's example loads unchanged.
        let o = check_config(&format!(
            "{base}{}",
            r#"[oauthbearer]
validator = "jwks"
jwks_url = "https://idp.example/realms/kafka/protocol/openid-connect/certs"
expected_issuer = "https://idp.example/realms/kafka"
expected_audience = ["kafka"]
allowed_urls = ["https://idp.example/"]
sub_claim_name = "sub"
scope_claim_name = "scope"
clock_skew_seconds = 30
"#
        ));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );

        // A URL outside the list is refused with the key named.
        let o = check_config(&format!(
            "{base}[oauthbearer]\njwks_url = \"https://idp.example.evil/certs\"\nallowed_urls = [\"https://idp.example\"]\n"
        ));
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("`oauthbearer.jwks_url`"), "{err}");
        assert!(
            err.contains("not allowed by oauthbearer.allowed_urls"),
            "{err}"
        );
    }

    #[test]
    fn plugins_lists_oauthbearer_as_a_built_in_mechanism() {
        let o = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .arg("plugins")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with("OAUTHBEARER") && l.contains("SASL mechanism")),
            "{out}"
        );
    }
}

#[test]
fn a_file_key_set_is_read_at_start_and_again_on_refresh() {
    let key = SigningKey::new("k1");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&key])).unwrap();
    let text = format!(
        "{}[oauthbearer]\njwks_url = \"file:{}\"\nexpected_issuer = \"https://idp.test\"\n\
         expected_audience = [\"kafka\"]\nallowed_urls = [\"file:{}/\"]\n\
         jwks_kid_refresh_min_interval_ms = 0\n",
        node_text("data", true),
        file.display(),
        dir.path().display()
    );
    let config: Config = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    let oauth = OAuthBearer::start(config.oauthbearer.as_ref().unwrap()).unwrap();
    assert_eq!(
        login(&*oauth.mechanism(), &key.token("frank", None)),
        Ok("frank".to_owned())
    );
    let second = SigningKey::new("k2");
    std::fs::write(&file, jwks(&[&key, &second])).unwrap();
    let token = second.token("grace", None);
    assert!(login(&*oauth.mechanism(), &token).is_err());
    let deadline = Instant::now() + WAIT;
    while login(&*oauth.mechanism(), &token).is_err() {
        assert!(Instant::now() < deadline, "the file was not read again");
        std::thread::sleep(Duration::from_millis(10));
    }
    oauth.shutdown();
}

#[test]
fn introspection_posts_the_token_with_basic_auth_from_a_blocking_thread() {
    let exp = now_ms() / 1000 + 3600;
    let server = JwksServer::start(
        serde_json::json!({"active": true, "sub": "heidi", "exp": exp, "scope": "kafka write",
                           "iss": "https://idp.test", "aud": "kafka"})
        .to_string(),
    );
    let base = format!("http://{}", server.address);
    let text = format!(
        "{}[oauthbearer]\nvalidator = \"introspection\"\nintrospection_url = \"{base}/introspect\"\n\
         introspection_client_id = \"portcullis\"\nexpected_issuer = \"https://idp.test\"\n\
         expected_audience = [\"kafka\"]\nallowed_urls = [\"{base}/\"]\n",
        node_text("data", true)
    );
    let config: Config = toml::from_str(&text).unwrap();
    let mut section = config.oauthbearer.unwrap();
    section.introspection_client_secret = Some(portcullis::secret::Secret::new("s3cr:t"));
    let oauth = OAuthBearer::start(&section).unwrap();
    assert_eq!(server.requests(), 0, "nothing fetched at start");
    let mechanism = oauth.mechanism();
    assert!(
        !mechanism.steps_are_cheap(),
        "introspection blocks: steps go off the runtime"
    );
    // As the host runs a step that may block: on a runtime's blocking pool.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let step = runtime.spawn_blocking({
        let mechanism = Arc::clone(&mechanism);
        move || login(&*mechanism, "opaque-token.123")
    });
    let answered = runtime.block_on(step).unwrap();
    assert_eq!(answered, Ok("heidi".to_owned()));
    let (head, body) = server.state.lock().unwrap().last.clone();
    assert!(head.starts_with("POST /introspect HTTP/1.1"), "{head}");
    let expected = format!(
        "authorization: Basic {}",
        base64::engine::general_purpose::STANDARD.encode("portcullis:s3cr%3At")
    );
    assert!(
        head.to_ascii_lowercase()
            .contains(&expected.to_ascii_lowercase()),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/x-www-form-urlencoded"),
        "{head}"
    );
    assert_eq!(body, "token=opaque-token.123&token_type_hint=access_token");
    // The answer is cached: a second login asks nobody.
    assert_eq!(
        login(&*mechanism, "opaque-token.123"),
        Ok("heidi".to_owned())
    );
    assert_eq!(server.requests(), 1);
    // An inactive token, an endpoint that fails: refused with Kafka's challenge.
    server.serve(200, r#"{"active": false}"#.to_owned());
    let challenge = login(&*mechanism, "another-token").unwrap_err();
    assert!(challenge.contains("invalid_token"), "{challenge}");
    server.serve(503, "{}".to_owned());
    let challenge = login(&*mechanism, "third-token").unwrap_err();
    assert!(challenge.contains("invalid_token"), "{challenge}");
    drop(runtime);
    oauth.shutdown();
}

#[test]
fn the_unsecured_validator_starts_without_any_io() {
    let text = format!(
        "{}[oauthbearer]\nvalidator = \"unsecured\"\nallow_unsecured = true\n",
        node_text("data", true)
    );
    let config: Config = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    let oauth = OAuthBearer::start(config.oauthbearer.as_ref().unwrap()).unwrap();
    let now = now_ms() / 1000;
    let token = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
        URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"mallory","exp":{}}}"#, now + 60))
    );
    assert_eq!(login(&*oauth.mechanism(), &token), Ok("mallory".to_owned()));
}

/// The same server behind TLS (the host's own rustls server configuration, a self-signed
/// certificate for 127.0.0.1).
fn tls_server(body: String, dir: &std::path::Path) -> (SocketAddr, std::path::PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_file = dir.join("cert.pem");
    let key_file = dir.join("key.pem");
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let config = portcullis_host::server::tls::server_config(&portcullis_host::config::TlsConfig {
        cert_file: cert_file.clone(),
        key_file,
        client_auth: portcullis_host::config::ClientAuth::None,
        ca_file: None,
    })
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let config = Arc::clone(&config);
            let body = body.clone();
            std::thread::spawn(move || {
                let mut connection = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::Stream::new(&mut connection, &mut stream);
                let mut reader = BufReader::new(&mut tls);
                let mut line = String::new();
                loop {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                drop(reader);
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes());
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    (address, cert_file)
}

#[test]
fn https_key_sets_are_verified_against_ca_file() {
    let key = SigningKey::new("k1");
    let dir = tempfile::tempdir().unwrap();
    let (address, cert_file) = tls_server(jwks(&[&key]), dir.path());
    let url = format!("https://{address}/jwks");
    let base = node_text("data", true);
    let text = |ca: &str| {
        format!(
            "{base}[oauthbearer]\njwks_url = \"{url}\"\nexpected_issuer = \"https://idp.test\"\n\
             expected_audience = [\"kafka\"]\nallowed_urls = [\"https://{address}/\"]\n\
             jwks_retry_backoff_ms = 10\njwks_retry_backoff_max_ms = 50\n{ca}"
        )
    };
    let config: Config =
        toml::from_str(&text(&format!("ca_file = \"{}\"\n", cert_file.display()))).unwrap();
    config.validate().unwrap();
    let oauth = OAuthBearer::start(config.oauthbearer.as_ref().unwrap()).unwrap();
    assert_eq!(
        login(&*oauth.mechanism(), &key.token("ivan", None)),
        Ok("ivan".to_owned())
    );
    oauth.shutdown();
    // Without the CA, the self-signed certificate is not trusted (system roots, or none at all).
    let config: Config = toml::from_str(&text("")).unwrap();
    let err = OAuthBearer::start(config.oauthbearer.as_ref().unwrap()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("certificate") || text.contains("oauthbearer.ca_file"),
        "{text}"
    );
}
