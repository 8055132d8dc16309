//! PLAIN server tests against real SCRAM credentials in the framework's in-memory view.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use portcullis::credentials::{InMemoryCredentials, ScramMechanism};
use portcullis::sasl::{AuthFailure, ExchangeContext, SaslMechanism, StepOutcome};
use portcullis_plugin_plain::{PasswordVerifier, PlainServer, INVALID_CREDENTIALS};
use portcullis_plugin_scram::{derive_credential, random_salt};

fn context() -> ExchangeContext {
    ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "test", 0)
}

fn set_password(
    creds: &InMemoryCredentials,
    user: &str,
    mechanism: ScramMechanism,
    password: &str,
) {
    creds.upsert(
        user,
        mechanism,
        derive_credential(mechanism, password, &random_salt(), 4096),
    );
}

fn setup() -> (Arc<InMemoryCredentials>, PlainServer) {
    let creds = Arc::new(InMemoryCredentials::new());
    set_password(&creds, "alice", ScramMechanism::Sha512, "alice-pw");
    set_password(&creds, "alice", ScramMechanism::Sha256, "alice-pw");
    set_password(&creds, "bob", ScramMechanism::Sha256, "bob-pw");
    let server = PlainServer::new(creds.clone());
    (creds, server)
}

fn login(server: &PlainServer, token: &[u8]) -> StepOutcome {
    server.start(&context()).step(token)
}

fn visible(outcome: StepOutcome) -> String {
    match outcome {
        StepOutcome::Fail(AuthFailure::Visible(message)) => message,
        other => panic!("expected a visible failure, got {other:?}"),
    }
}

fn authorization_id(outcome: StepOutcome) -> String {
    match outcome {
        StepOutcome::Complete(done) => {
            assert!(done.server_final.is_empty());
            assert_eq!(done.credential_expiry_ms, None);
            done.authorization_id
        }
        other => panic!("expected Complete, got {other:?}"),
    }
}

#[test]
fn correct_password_authenticates() {
    let (_, server) = setup();
    assert_eq!(
        authorization_id(login(&server, b"\0alice\0alice-pw")),
        "alice"
    );
    // Only a SCRAM-SHA-256 credential: still usable.
    assert_eq!(authorization_id(login(&server, b"\0bob\0bob-pw")), "bob");
    // authzid equal to the user name is allowed.
    assert_eq!(
        authorization_id(login(&server, b"alice\0alice\0alice-pw")),
        "alice"
    );
}

#[test]
fn wrong_password_and_unknown_user_get_the_same_message() {
    let (_, server) = setup();
    assert_eq!(
        visible(login(&server, b"\0alice\0wrong")),
        INVALID_CREDENTIALS
    );
    assert_eq!(
        visible(login(&server, b"\0bob\0alice-pw")),
        INVALID_CREDENTIALS
    );
    assert_eq!(
        visible(login(&server, b"\0nobody\0alice-pw")),
        INVALID_CREDENTIALS
    );
    assert_eq!(
        INVALID_CREDENTIALS,
        "Authentication failed: Invalid username or password"
    );
}

#[test]
fn token_counts_and_empty_fields() {
    let (_, server) = setup();
    assert_eq!(
        visible(login(&server, b"\0alice")),
        "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
    );
    assert_eq!(
        visible(login(&server, b"\0alice\0alice-pw\0x")),
        "Invalid SASL/PLAIN response: expected 3 tokens, got 4"
    );
    assert_eq!(
        visible(login(&server, b"\0alice\0alice-pw\0x\0y\0z")),
        "Invalid SASL/PLAIN response: expected 3 tokens, got 4"
    );
    assert_eq!(
        visible(login(&server, b"\0\0alice-pw")),
        "Authentication failed: username not specified"
    );
    assert_eq!(
        visible(login(&server, b"\0alice\0")),
        "Authentication failed: password not specified"
    );
}

#[test]
fn authzid_must_be_empty_or_the_user() {
    let (_, server) = setup();
    assert_eq!(
        visible(login(&server, b"admin\0alice\0alice-pw")),
        "Authentication failed: Client requested an authorization id that is different from username"
    );
}

#[test]
fn exchange_is_single_step() {
    let (_, server) = setup();
    let mut exchange = server.start(&context());
    assert!(matches!(
        exchange.step(b"\0alice\0alice-pw"),
        StepOutcome::Complete(_)
    ));
    assert!(matches!(
        exchange.step(b"\0alice\0alice-pw"),
        StepOutcome::Fail(AuthFailure::Hidden(_))
    ));
}

#[test]
fn second_login_does_not_derive_again() {
    let (_, server) = setup();
    let verifier = server.verifier();
    assert_eq!(verifier.derivations(), 0);
    authorization_id(login(&server, b"\0alice\0alice-pw"));
    assert_eq!(verifier.derivations(), 1);
    authorization_id(login(&server, b"\0alice\0alice-pw"));
    authorization_id(login(&server, b"alice\0alice\0alice-pw"));
    assert_eq!(
        verifier.derivations(),
        1,
        "a cached password was derived again"
    );
    assert_eq!(verifier.cached_entries(), 1);
    // Failures are derived every time and never cached.
    visible(login(&server, b"\0alice\0wrong"));
    visible(login(&server, b"\0alice\0wrong"));
    assert_eq!(verifier.derivations(), 3);
    assert_eq!(verifier.cached_entries(), 1);
    // Unknown users cost a derivation too (no timing shortcut), and are not cached.
    visible(login(&server, b"\0nobody\0x"));
    assert_eq!(verifier.derivations(), 4);
    assert_eq!(verifier.cached_entries(), 1);
}

#[test]
fn changed_credential_invalidates_the_cache() {
    let (creds, server) = setup();
    authorization_id(login(&server, b"\0alice\0alice-pw"));
    // New password, new salt (the usual change).
    set_password(&creds, "alice", ScramMechanism::Sha512, "new-pw");
    assert_eq!(
        visible(login(&server, b"\0alice\0alice-pw")),
        INVALID_CREDENTIALS
    );
    assert_eq!(
        authorization_id(login(&server, b"\0alice\0new-pw")),
        "alice"
    );

    // New password under the *same* salt and iteration count: the old entry's key still matches,
    // but its remembered StoredKey no longer does.
    let salt = random_salt();
    creds.upsert(
        "alice",
        ScramMechanism::Sha512,
        derive_credential(ScramMechanism::Sha512, "v1", &salt, 4096),
    );
    authorization_id(login(&server, b"\0alice\0v1"));
    let before = server.verifier().derivations();
    creds.upsert(
        "alice",
        ScramMechanism::Sha512,
        derive_credential(ScramMechanism::Sha512, "v2", &salt, 4096),
    );
    assert_eq!(visible(login(&server, b"\0alice\0v1")), INVALID_CREDENTIALS);
    assert_eq!(
        server.verifier().derivations(),
        before,
        "the stale entry should have answered"
    );
    assert_eq!(authorization_id(login(&server, b"\0alice\0v2")), "alice");

    // Credential removed.
    creds.remove("alice", ScramMechanism::Sha512);
    creds.remove("alice", ScramMechanism::Sha256);
    assert_eq!(visible(login(&server, b"\0alice\0v2")), INVALID_CREDENTIALS);
}

#[test]
fn cache_is_bounded() {
    let creds = Arc::new(InMemoryCredentials::new());
    for user in ["u1", "u2", "u3"] {
        set_password(&creds, user, ScramMechanism::Sha256, "pw");
    }
    let server = PlainServer::with_verifier(creds.clone(), Arc::new(PasswordVerifier::new(2)));
    for user in ["u1", "u2", "u3"] {
        authorization_id(login(&server, format!("\0{user}\0pw").as_bytes()));
    }
    assert_eq!(server.verifier().cached_entries(), 2);
    assert_eq!(server.verifier().derivations(), 3);
    // u1 was evicted (oldest) and is derived again; u3 is still cached.
    authorization_id(login(&server, b"\0u3\0pw"));
    assert_eq!(server.verifier().derivations(), 3);
    authorization_id(login(&server, b"\0u1\0pw"));
    assert_eq!(server.verifier().derivations(), 4);
}

#[test]
fn weak_or_excessive_iteration_counts_are_refused() {
    let creds = Arc::new(InMemoryCredentials::new());
    for (user, iterations) in [("weak", 4095), ("huge", 16385)] {
        creds.upsert(
            user,
            ScramMechanism::Sha256,
            derive_credential(ScramMechanism::Sha256, "pw", &random_salt(), iterations),
        );
    }
    let server = PlainServer::new(creds);
    assert_eq!(visible(login(&server, b"\0weak\0pw")), INVALID_CREDENTIALS);
    assert_eq!(visible(login(&server, b"\0huge\0pw")), INVALID_CREDENTIALS);
}

#[test]
fn registered_with_the_host_registry() {
    let factory = portcullis::registry::mechanisms()
        .find(|f| f.name == "PLAIN")
        .expect("PLAIN is registered");
    let host = portcullis::Host::with_views(setup().0, Arc::new(portcullis::credentials::NoTokens));
    let mechanism = (factory.build)("", &host).unwrap();
    // PLAIN takes no configuration of its own: a key in its table is refused.
    assert!((factory.build)("cache = 1", &host).is_err());
    assert!((factory.check_config)("cache = 1").is_err());
    assert_eq!(mechanism.name(), "PLAIN");
    assert_eq!(
        authorization_id(mechanism.start(&context()).step(b"\0alice\0alice-pw")),
        "alice"
    );
}

#[test]
fn a_login_reports_the_scram_credential_that_verified_it() {
    // Sessions are revoked by what authenticated them: a PLAIN login depends on the SCRAM
    // credential its password was checked against (SHA-512 first, SHA-256 otherwise).
    let (_, server) = setup();
    let credential = |token: &[u8]| match login(&server, token) {
        StepOutcome::Complete(done) => done.credential,
        other => panic!("expected Complete, got {other:?}"),
    };
    assert_eq!(
        credential(b"\0alice\0alice-pw"),
        Some(portcullis::credentials::CredentialId::scram(
            "alice",
            ScramMechanism::Sha512
        ))
    );
    assert_eq!(
        credential(b"\0bob\0bob-pw"),
        Some(portcullis::credentials::CredentialId::scram(
            "bob",
            ScramMechanism::Sha256
        ))
    );
}
