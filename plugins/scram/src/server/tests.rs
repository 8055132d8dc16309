//! Server tests: RFC 7677 vector, round trips against [`ScramClient`], and refusals.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use portcullis::credentials::{InMemoryCredentials, NoTokens, TokenCredential};
use portcullis::login::SaslClientExchange;
use portcullis::secret::Secret;

use super::*;
use crate::client::ScramClient;
use crate::keys::{derive_credential, random_salt};

const NOW_MS: i64 = 1_700_000_000_000;

fn context() -> ExchangeContext {
    ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "test", NOW_MS)
}

fn users(entries: &[(&str, ScramMechanism, &str, u32)]) -> Arc<InMemoryCredentials> {
    let creds = InMemoryCredentials::new();
    for (user, mechanism, password, iterations) in entries {
        creds.upsert(
            user,
            *mechanism,
            derive_credential(*mechanism, password, &random_salt(), *iterations),
        );
    }
    Arc::new(creds)
}

fn server(mechanism: ScramMechanism, creds: Arc<InMemoryCredentials>) -> ScramServer {
    ScramServer::new(mechanism, creds, Arc::new(NoTokens))
}

/// Runs a full exchange; returns the server's final outcome and whether the client verified it.
fn run(server: &ScramServer, mut client: ScramClient) -> (StepOutcome, bool) {
    let mut exchange = server.start(&context());
    let first = client.initial().unwrap();
    let server_first = match exchange.step(&first) {
        StepOutcome::Continue(bytes) => bytes,
        other => return (other, false),
    };
    let client_final = client.step(&server_first).unwrap().unwrap();
    let outcome = exchange.step(&client_final);
    let verified = match &outcome {
        StepOutcome::Complete(done) => {
            assert_eq!(client.step(&done.server_final).unwrap(), None);
            client.is_complete()
        }
        _ => false,
    };
    (outcome, verified)
}

fn client(mechanism: ScramMechanism, user: &str, password: &str) -> ScramClient {
    ScramClient::new(mechanism, user, Secret::new(password))
}

fn expect_continue(outcome: StepOutcome) -> Vec<u8> {
    match outcome {
        StepOutcome::Continue(bytes) => bytes,
        other => panic!("expected Continue, got {other:?}"),
    }
}

fn expect_fail(outcome: StepOutcome) -> AuthFailure {
    match outcome {
        StepOutcome::Fail(failure) => failure,
        other => panic!("expected Fail, got {other:?}"),
    }
}

// RFC 7677 §3.
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn rfc7677_credentials() -> Arc<InMemoryCredentials> {
    let creds = InMemoryCredentials::new();
    let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    creds.upsert(
        "user",
        ScramMechanism::Sha256,
        derive_credential(ScramMechanism::Sha256, "pencil", &salt, 4096),
    );
    Arc::new(creds)
}

#[test]
fn rfc7677_server_vector() {
    let server =
        server(ScramMechanism::Sha256, rfc7677_credentials()).with_fixed_nonce(RFC_SERVER_NONCE);
    let mut exchange = server.start(&context());
    let server_first = expect_continue(exchange.step(RFC_CLIENT_FIRST.as_bytes()));
    assert_eq!(String::from_utf8(server_first).unwrap(), RFC_SERVER_FIRST);
    match exchange.step(RFC_CLIENT_FINAL.as_bytes()) {
        StepOutcome::Complete(done) => {
            assert_eq!(done.authorization_id, "user");
            assert_eq!(
                String::from_utf8(done.server_final).unwrap(),
                RFC_SERVER_FINAL
            );
            assert_eq!(done.token_id, None);
            assert_eq!(done.credential_expiry_ms, None);
        }
        other => panic!("expected Complete, got {other:?}"),
    }
    // Finished: any further token fails.
    expect_fail(exchange.step(RFC_CLIENT_FINAL.as_bytes()));
}

#[test]
fn rfc7677_client_vector() {
    let mut client =
        client(ScramMechanism::Sha256, "user", "pencil").with_fixed_nonce("rOprNGfwEbeRWgbNEkqO");
    assert_eq!(client.initial().unwrap(), RFC_CLIENT_FIRST.as_bytes());
    let client_final = client.step(RFC_SERVER_FIRST.as_bytes()).unwrap().unwrap();
    assert_eq!(String::from_utf8(client_final).unwrap(), RFC_CLIENT_FINAL);
    assert!(!client.is_complete());
    assert_eq!(client.step(RFC_SERVER_FINAL.as_bytes()).unwrap(), None);
    assert!(client.is_complete());
}

#[test]
fn client_refuses_a_forged_server_signature() {
    let mut client =
        client(ScramMechanism::Sha256, "user", "pencil").with_fixed_nonce("rOprNGfwEbeRWgbNEkqO");
    client.initial().unwrap();
    client.step(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert!(client
        .step(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
        .is_err());
    assert!(!client.is_complete());
}

#[test]
fn client_refuses_a_server_nonce_that_does_not_extend_its_own() {
    fn started() -> ScramClient {
        let mut c = client(ScramMechanism::Sha256, "user", "pencil")
            .with_fixed_nonce("rOprNGfwEbeRWgbNEkqO");
        c.initial().unwrap();
        c
    }
    for bad in [
        "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        "r=XOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        // Iteration counts outside the accepted range.
        "r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095",
        "r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100001",
    ] {
        let mut c = started();
        assert!(c.step(bad.as_bytes()).is_err(), "{bad}");
        assert!(!c.is_complete());
    }
    // The same client accepts the real server-first message.
    assert!(started().step(RFC_SERVER_FIRST.as_bytes()).is_ok());
}

#[test]
fn sha512_and_sha256_round_trips() {
    for mechanism in ScramMechanism::ALL {
        let creds = users(&[("alice", mechanism, "alice-secret", 4096)]);
        let (outcome, verified) = run(
            &server(mechanism, creds),
            client(mechanism, "alice", "alice-secret"),
        );
        match outcome {
            StepOutcome::Complete(done) => {
                assert_eq!(done.authorization_id, "alice");
                assert!(done.extensions.is_empty());
            }
            other => panic!("{mechanism}: expected Complete, got {other:?}"),
        }
        assert!(verified, "{mechanism}: client did not verify the server");
    }
}

#[test]
fn escaped_user_names_round_trip() {
    let creds = users(&[("a=b,c", ScramMechanism::Sha512, "pw", 4096)]);
    let (outcome, verified) = run(
        &server(ScramMechanism::Sha512, creds),
        client(ScramMechanism::Sha512, "a=b,c", "pw"),
    );
    assert!(
        matches!(outcome, StepOutcome::Complete(ref d) if d.authorization_id == "a=b,c"),
        "{outcome:?}"
    );
    assert!(verified);
}

#[test]
fn wrong_password_fails_hidden() {
    let creds = users(&[("alice", ScramMechanism::Sha512, "right", 4096)]);
    let (outcome, _) = run(
        &server(ScramMechanism::Sha512, creds),
        client(ScramMechanism::Sha512, "alice", "wrong"),
    );
    assert!(matches!(expect_fail(outcome), AuthFailure::Hidden(_)));
}

#[test]
fn credential_of_the_other_mechanism_does_not_count() {
    let creds = users(&[("alice", ScramMechanism::Sha256, "pw", 4096)]);
    let (outcome, _) = run(
        &server(ScramMechanism::Sha512, creds),
        client(ScramMechanism::Sha512, "alice", "pw"),
    );
    assert!(matches!(expect_fail(outcome), AuthFailure::Hidden(_)));
}

/// The server-first message for `user`, parsed.
fn server_first_for(server: &ScramServer, user: &str) -> crate::messages::ServerFirst {
    let mut exchange = server.start(&context());
    let reply = expect_continue(exchange.step(format!("n,,n={user},r=clientnonce").as_bytes()));
    crate::messages::parse_server_first(&reply).unwrap()
}

#[test]
fn unknown_user_is_indistinguishable_from_wrong_password() {
    let mechanism = ScramMechanism::Sha512;
    let creds = users(&[("alice", mechanism, "right", 4096)]);
    let server = server(mechanism, creds);

    let known = server_first_for(&server, "alice");
    let unknown = server_first_for(&server, "mallory");
    let unknown_again = server_first_for(&server, "mallory");
    assert_eq!(known.salt.len(), unknown.salt.len(), "salt length differs");
    assert_eq!(known.iterations, unknown.iterations, "i= differs");
    assert_eq!(
        unknown.salt, unknown_again.salt,
        "fake salt changes between attempts"
    );
    assert_eq!(known.nonce.len(), unknown.nonce.len());
    assert_ne!(server_first_for(&server, "mallory2").salt, unknown.salt);

    let (wrong, _) = run(&server, client(mechanism, "alice", "wrong"));
    let (missing, _) = run(&server, client(mechanism, "mallory", "whatever"));
    let wrong = expect_fail(wrong);
    let missing = expect_fail(missing);
    assert!(matches!(wrong, AuthFailure::Hidden(_)));
    assert!(matches!(missing, AuthFailure::Hidden(_)));
    assert_eq!(
        wrong.client_message(mechanism.mechanism_name(), false),
        missing.client_message(mechanism.mechanism_name(), false)
    );
}

#[test]
fn weak_stored_credential_never_authenticates() {
    let mechanism = ScramMechanism::Sha256;
    let creds = users(&[("weak", mechanism, "pw", 4095)]);
    let server = server(mechanism, creds);
    assert_eq!(server_first_for(&server, "weak").iterations, 4096);
    let (outcome, _) = run(&server, client(mechanism, "weak", "pw"));
    assert!(matches!(expect_fail(outcome), AuthFailure::Hidden(_)));
}

#[test]
fn authzid_must_be_empty_or_the_user() {
    let mechanism = ScramMechanism::Sha256;
    let creds = users(&[("alice", mechanism, "pw", 4096)]);
    let server = server(mechanism, creds);
    let mut exchange = server.start(&context());
    assert_eq!(
        expect_fail(exchange.step(b"n,a=admin,n=alice,r=abc")),
        AuthFailure::Visible(AUTHZID_MISMATCH.to_owned())
    );
    // Same answer for a user that does not exist: the check does not depend on the lookup.
    let mut exchange = server.start(&context());
    assert_eq!(
        expect_fail(exchange.step(b"n,a=admin,n=nobody,r=abc")),
        AuthFailure::Visible(AUTHZID_MISMATCH.to_owned())
    );
}

/// Drives a hand-made exchange whose client-final message is built by `make_final` from the
/// server-first message, with the correct proof for the AuthMessage it implies.
fn hand_exchange(
    mechanism: ScramMechanism,
    client_first: &str,
    make_final: impl Fn(&str) -> String,
) -> StepOutcome {
    let salt = random_salt();
    let creds = InMemoryCredentials::new();
    creds.upsert(
        "alice",
        mechanism,
        derive_credential(mechanism, "pw", &salt, 4096),
    );
    let server = server(mechanism, Arc::new(creds));
    let mut exchange = server.start(&context());
    let server_first =
        String::from_utf8(expect_continue(exchange.step(client_first.as_bytes()))).unwrap();
    let without_proof = make_final(&server_first);
    let bare = client_first.splitn(3, ',').nth(2).unwrap();
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let salted = crate::keys::salted_password(mechanism, b"pw", &salt, 4096);
    let client_key = crate::keys::client_key(mechanism, &salted);
    let signature = hmac(
        mechanism,
        &hash(mechanism, &client_key),
        &[auth_message.as_bytes()],
    );
    let proof = B64.encode(xor(&client_key, &signature));
    exchange.step(format!("{without_proof},p={proof}").as_bytes())
}

fn combined_nonce(server_first: &str) -> &str {
    server_first
        .strip_prefix("r=")
        .unwrap()
        .split(',')
        .next()
        .unwrap()
}

#[test]
fn hand_exchange_with_correct_values_succeeds() {
    let outcome = hand_exchange(ScramMechanism::Sha256, "n,,n=alice,r=cn", |sf| {
        format!("c=biws,r={}", combined_nonce(sf))
    });
    assert!(matches!(outcome, StepOutcome::Complete(_)), "{outcome:?}");
    // With an authzid, c= must carry that same gs2 header.
    let outcome = hand_exchange(ScramMechanism::Sha256, "n,a=alice,n=alice,r=cn", |sf| {
        format!("c={},r={}", B64.encode("n,a=alice,"), combined_nonce(sf))
    });
    assert!(
        matches!(outcome, StepOutcome::Complete(ref d) if d.authorization_id == "alice"),
        "{outcome:?}"
    );
}

#[test]
fn nonce_must_equal_the_combined_nonce_exactly() {
    // CVE-2024-56128: Kafka's fix accepted any nonce that *ends with* the combined nonce.
    for make in [
        |n: &str| format!("x{n}"),
        |n: &str| format!("{n}x"),
        |n: &str| n.get(..n.len() - 1).unwrap().to_owned(),
        |_: &str| "cn".to_owned(),
    ] {
        let outcome = hand_exchange(ScramMechanism::Sha256, "n,,n=alice,r=cn", |sf| {
            format!("c=biws,r={}", make(combined_nonce(sf)))
        });
        assert!(matches!(expect_fail(outcome), AuthFailure::Hidden(_)));
    }
}

#[test]
fn channel_binding_must_echo_the_gs2_header() {
    for header in ["n,a=alice,", "y,,", "n,,x", ""] {
        let outcome = hand_exchange(ScramMechanism::Sha256, "n,,n=alice,r=cn", |sf| {
            format!("c={},r={}", B64.encode(header), combined_nonce(sf))
        });
        assert!(
            matches!(expect_fail(outcome), AuthFailure::Hidden(_)),
            "{header}"
        );
    }
}

#[test]
fn garbage_fails_and_never_panics() {
    let creds = users(&[("alice", ScramMechanism::Sha256, "pw", 4096)]);
    let server = server(ScramMechanism::Sha256, creds);
    let firsts: &[&[u8]] = &[
        b"",
        b"n",
        b"n,",
        b"n,,",
        b"n,,n",
        b"n,,n=",
        b"n,a,n=x,r=y",
        b"n,a=,n=x,r=y",
        b"y,,n=alice,r=x",
        b"p=tls-server-end-point,,n=alice,r=x",
        b"n,,m=1,n=alice,r=x",
        b"n,,n=alice",
        b"n,,n=alice,r=",
        b"n,,n=al=ice,r=x",
        b"\xff\xfe",
        b",,,,,,",
        b"n,,n=alice,r=x,=",
        b"n,,n=alice,r=x,k=v,k=w",
        b"n,,r=x,n=alice",
    ];
    for first in firsts {
        let mut exchange = server.start(&context());
        assert!(
            matches!(
                exchange.step(first),
                StepOutcome::Fail(AuthFailure::Hidden(_))
            ),
            "{}",
            String::from_utf8_lossy(first)
        );
    }
    let finals: &[&[u8]] = &[
        b"",
        b"c=",
        b"c=biws",
        b"c=biws,r=",
        b"c=biws,r=x,p=",
        b"c=biws,r=x,p=!!",
        b"p=abc",
        b",,,",
        b"c=biws,p=abc,r=x",
        b"c=biws,r=x,p=AAAA",
    ];
    for last in finals {
        let mut exchange = server.start(&context());
        expect_continue(exchange.step(b"n,,n=alice,r=abc"));
        assert!(
            matches!(
                exchange.step(last),
                StepOutcome::Fail(AuthFailure::Hidden(_))
            ),
            "{}",
            String::from_utf8_lossy(last)
        );
        // A failed exchange stays failed.
        expect_fail(exchange.step(b"c=biws,r=x,p=AAAA"));
    }
}

#[test]
fn proof_of_the_wrong_length_fails() {
    let mechanism = ScramMechanism::Sha512;
    let server = server(mechanism, users(&[("alice", mechanism, "pw", 4096)]));
    for len in [0usize, 32, 65] {
        let mut exchange = server.start(&context());
        let server_first =
            String::from_utf8(expect_continue(exchange.step(b"n,,n=alice,r=cn"))).unwrap();
        let last = format!(
            "c=biws,r={},p={}",
            combined_nonce(&server_first),
            B64.encode(vec![0u8; len])
        );
        let failure = expect_fail(exchange.step(last.as_bytes()));
        assert!(matches!(failure, AuthFailure::Hidden(_)), "{len}");
        assert!(
            failure.reason().contains("length") || failure.reason().contains("format"),
            "{len}: {}",
            failure.reason()
        );
    }
}

#[test]
fn extension_order_is_kept_in_the_auth_message() {
    // A server that re-serialised extensions from a sorted or hashed map would compute a
    // different AuthMessage for this order and refuse the proof.
    let mechanism = ScramMechanism::Sha256;
    let creds = users(&[("alice", mechanism, "pw", 4096)]);
    let client = client(mechanism, "alice", "pw").with_extensions(vec![
        ("zeta".to_owned(), "1".to_owned()),
        ("alpha".to_owned(), "2".to_owned()),
    ]);
    let (outcome, verified) = run(&server(mechanism, creds), client);
    match outcome {
        StepOutcome::Complete(done) => {
            assert_eq!(done.extensions.get("zeta").map(String::as_str), Some("1"));
            assert_eq!(done.extensions.get("alpha").map(String::as_str), Some("2"));
        }
        other => panic!("expected Complete, got {other:?}"),
    }
    assert!(verified);
}

/// A token view backed by a map: the framework's trait, implemented for the test.
struct Tokens(HashMap<String, TokenCredential>);

impl TokenView for Tokens {
    fn token(&self, token_id: &str, mechanism: ScramMechanism) -> Option<TokenCredential> {
        self.0
            .get(token_id)
            .filter(|_| mechanism == ScramMechanism::Sha512)
            .cloned()
    }
}

fn token_server() -> ScramServer {
    let mechanism = ScramMechanism::Sha512;
    let mut tokens = HashMap::new();
    for (id, hmac_b64, expiry_ms) in [
        ("tok-live", "bGl2ZS1obWFj", NOW_MS + 60_000),
        ("tok-old", "b2xkLWhtYWM=", NOW_MS - 1),
    ] {
        let credential = derive_credential(mechanism, hmac_b64, &random_salt(), 4096);
        let token = TokenCredential::new("owner-bob", credential, expiry_ms);
        tokens.insert(id.to_owned(), token);
    }
    // A user whose name is a token id, to show the two namespaces stay apart.
    let creds = users(&[("tok-live", mechanism, "user-password", 4096)]);
    ScramServer::new(mechanism, creds, Arc::new(Tokens(tokens)))
}

fn token_client(id: &str, password: &str, flag: &str) -> ScramClient {
    client(ScramMechanism::Sha512, id, password)
        .with_extensions(vec![("tokenauth".to_owned(), flag.to_owned())])
}

#[test]
fn tokenauth_authenticates_as_the_token_owner() {
    let server = token_server();
    for flag in ["true", "TRUE", "True"] {
        let (outcome, verified) = run(&server, token_client("tok-live", "bGl2ZS1obWFj", flag));
        match outcome {
            StepOutcome::Complete(done) => {
                assert_eq!(done.authorization_id, "owner-bob");
                assert_eq!(done.token_id.as_deref(), Some("tok-live"));
                assert_eq!(done.credential_expiry_ms, Some(NOW_MS + 60_000));
                assert_eq!(
                    done.extensions.get("tokenauth").map(String::as_str),
                    Some(flag)
                );
            }
            other => panic!("expected Complete, got {other:?}"),
        }
        assert!(verified);
    }
}

#[test]
fn tokenauth_failures_look_like_wrong_passwords() {
    let server = token_server();
    // Unknown token, expired token, wrong token password.
    for (id, password) in [
        ("tok-none", "bGl2ZS1obWFj"),
        ("tok-old", "b2xkLWhtYWM="),
        ("tok-live", "wrong"),
    ] {
        let (outcome, _) = run(&server, token_client(id, password, "true"));
        assert!(
            matches!(expect_fail(outcome), AuthFailure::Hidden(_)),
            "{id}"
        );
    }
    let known = server_first_for_token(&server, "tok-live");
    let unknown = server_first_for_token(&server, "tok-none");
    assert_eq!(known.salt.len(), unknown.salt.len());
    assert_eq!(known.iterations, unknown.iterations);
    assert_eq!(
        unknown.salt,
        server_first_for_token(&server, "tok-none").salt
    );
}

fn server_first_for_token(server: &ScramServer, id: &str) -> crate::messages::ServerFirst {
    let mut exchange = server.start(&context());
    let reply = expect_continue(exchange.step(format!("n,,n={id},r=cn,tokenauth=true").as_bytes()));
    crate::messages::parse_server_first(&reply).unwrap()
}

#[test]
fn without_tokenauth_the_name_is_a_user() {
    let server = token_server();
    // The token password does not work as the user's password, and vice versa.
    for flag in ["false", "yes"] {
        let (outcome, _) = run(&server, token_client("tok-live", "bGl2ZS1obWFj", flag));
        expect_fail(outcome);
        let (outcome, _) = run(&server, token_client("tok-live", "user-password", flag));
        match outcome {
            StepOutcome::Complete(done) => {
                assert_eq!(done.authorization_id, "tok-live");
                assert_eq!(done.token_id, None);
            }
            other => panic!("expected Complete, got {other:?}"),
        }
    }
}

// ---- With the framework's token manager ---------------------------------------------------------

mod with_token_manager {
    use super::*;
    use portcullis::secret::Secret;
    use portcullis::store::memory::MemoryStore;
    use portcullis::store::MetadataStore;
    use portcullis::tokens::{id, CreateRequest, TokenConfig, TokenManager};

    const NOW: i64 = 1_700_000_000_000;

    /// A manager following a log with one token of `alice`'s; returns (server, id, password).
    fn setup(
        accept_without_extension: bool,
    ) -> (ScramServer, String, String, Arc<InMemoryCredentials>) {
        let manager = Arc::new(TokenManager::new(
            TokenConfig::new(Secret::new("node-secret"))
                .with_accept_token_without_extension(accept_without_extension),
            Arc::new(crate::ScramTokenCrypto),
            NOW,
        ));
        let store = MemoryStore::new();
        let m = manager.clone();
        store
            .subscribe(
                0,
                Box::new(move |r| {
                    m.apply(r, NOW);
                }),
            )
            .unwrap();
        let token = manager
            .create(
                &CreateRequest {
                    requester: portcullis::principal::Principal::user("alice"),
                    owner: portcullis::principal::Principal::user("alice"),
                    renewers: vec![],
                    max_lifetime_ms: -1,
                },
                NOW,
            )
            .unwrap();
        store.append_batch(&token.batch).unwrap();
        let creds = users(&[("alice", ScramMechanism::Sha512, "alice-pw", 4096)]);
        let server = ScramServer::new(ScramMechanism::Sha512, creds.clone(), manager);
        (
            server,
            token.info.token_id,
            id::password(&token.hmac),
            creds,
        )
    }

    fn at_now(server: &ScramServer, client: ScramClient) -> StepOutcome {
        let mut exchange = server.start_exchange(&ExchangeContext::new(
            std::net::IpAddr::from([127, 0, 0, 1]),
            "t",
            NOW,
        ));
        let mut client = client;
        let first = client.initial().unwrap();
        let server_first = expect_continue(exchange.step(&first));
        let last = client.step(&server_first).unwrap().unwrap();
        exchange.step(&last)
    }

    #[test]
    fn the_base64_hmac_is_the_password_of_the_token_id_with_tokenauth() {
        let (server, token_id, password, _) = setup(false);
        match at_now(&server, token_client(&token_id, &password, "true")) {
            StepOutcome::Complete(done) => {
                assert_eq!(done.authorization_id, "alice");
                assert_eq!(done.token_id.as_deref(), Some(token_id.as_str()));
                assert_eq!(
                    done.credential,
                    Some(portcullis::credentials::CredentialId::token(
                        token_id.clone()
                    ))
                );
                assert_eq!(done.credential_expiry_ms, Some(NOW + 86_400_000));
            }
            other => panic!("{other:?}"),
        }
        // Without the extension (and without the opt-in) the id is not a user.
        assert!(matches!(
            at_now(
                &server,
                client(ScramMechanism::Sha512, &token_id, &password)
            ),
            StepOutcome::Fail(_)
        ));
    }

    #[test]
    fn opted_in_a_token_id_logs_in_without_the_extension_and_users_still_work() {
        let (server, token_id, password, _) = setup(true);
        match at_now(
            &server,
            client(ScramMechanism::Sha512, &token_id, &password),
        ) {
            StepOutcome::Complete(done) => {
                assert_eq!(done.authorization_id, "alice");
                assert_eq!(done.token_id.as_deref(), Some(token_id.as_str()));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            at_now(&server, client(ScramMechanism::Sha512, "alice", "alice-pw")),
            StepOutcome::Complete(_)
        ));
        assert!(matches!(
            at_now(&server, client(ScramMechanism::Sha512, &token_id, "wrong")),
            StepOutcome::Fail(_)
        ));
    }
}
