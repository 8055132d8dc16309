//! The login modules against the real built-in servers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use portcullis::credentials::{
    InMemoryCredentials, NoTokens, ScramMechanism, TokenCredential, TokenView,
};
use portcullis::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};
use portcullis::sasl::{Authenticated, ExchangeContext, SaslMechanism, StepOutcome};
use portcullis::secret::Secret;
use portcullis_plugin_login::{
    login_module, start_exchange, PlainLogin, ResolvedLogin, ScramLogin,
};
use portcullis_plugin_plain::PlainServer;
use portcullis_plugin_scram::{derive_credential, random_salt, ScramServer};

fn context() -> ExchangeContext {
    ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "test", 1_000)
}

fn credentials() -> Arc<InMemoryCredentials> {
    let creds = InMemoryCredentials::new();
    for mechanism in ScramMechanism::ALL {
        creds.upsert(
            "svc",
            mechanism,
            derive_credential(mechanism, "svc-pw", &random_salt(), 4096),
        );
    }
    Arc::new(creds)
}

/// Drives a client exchange against a server exchange the way a connection would: the client's
/// tokens go to the server, the server's answers back to the client, until both are done.
fn drive(login: &dyn LoginModule, server: &dyn SaslMechanism) -> Result<Authenticated, String> {
    let mut client = start_exchange(login).map_err(|e| e.to_string())?;
    let mut exchange = server.start(&context());
    let mut token = client.initial().map_err(|e| e.to_string())?;
    loop {
        match exchange.step(&token) {
            StepOutcome::Continue(reply) => match client.step(&reply) {
                Ok(Some(next)) => token = next,
                Ok(None) => return Err("client stopped before the server".to_owned()),
                Err(e) => return Err(e.to_string()),
            },
            StepOutcome::Complete(done) => {
                client
                    .step(&done.server_final)
                    .map_err(|e: LoginError| e.to_string())?;
                assert!(client.is_complete(), "client did not complete");
                return Ok(done);
            }
            StepOutcome::Fail(failure) => return Err(failure.reason().to_owned()),
            other => return Err(format!("unexpected outcome {other:?}")),
        }
    }
}

#[test]
fn scram_login_against_the_scram_server() {
    let creds = credentials();
    for mechanism in ScramMechanism::ALL {
        let server = ScramServer::new(mechanism, creds.clone(), Arc::new(NoTokens));
        let login = ScramLogin::new(mechanism, "svc", Secret::new("svc-pw"));
        assert_eq!(login.mechanism(), mechanism.mechanism_name());
        assert_eq!(login.credential().principal_name, "svc");
        // Twice: the second exchange uses the module's salted-password cache.
        for _ in 0..2 {
            let done = drive(&login, &server).unwrap();
            assert_eq!(done.authorization_id, "svc");
        }
        let wrong = ScramLogin::new(mechanism, "svc", Secret::new("nope"));
        assert!(drive(&wrong, &server).is_err());
    }
}

#[test]
fn scram_login_with_a_delegation_token() {
    struct OneToken(TokenCredential);
    impl TokenView for OneToken {
        fn token(&self, id: &str, _mechanism: ScramMechanism) -> Option<TokenCredential> {
            (id == "tok-1").then(|| self.0.clone())
        }
    }
    let mechanism = ScramMechanism::Sha512;
    let hmac = "c2VjcmV0LWhtYWM=";
    let token = TokenCredential::new(
        "owner",
        derive_credential(mechanism, hmac, &random_salt(), 4096),
        60_000,
    );
    let server = ScramServer::new(mechanism, credentials(), Arc::new(OneToken(token)));
    let login = ScramLogin::delegation_token(mechanism, "tok-1", Secret::new(hmac));
    let done = drive(&login, &server).unwrap();
    assert_eq!(done.authorization_id, "owner");
    assert_eq!(done.token_id.as_deref(), Some("tok-1"));
    assert_eq!(
        done.extensions,
        HashMap::from([("tokenauth".to_owned(), "true".to_owned())])
            .into_iter()
            .collect()
    );
    // Without tokenauth the id is looked up as a user name and fails.
    let as_user = ScramLogin::new(mechanism, "tok-1", Secret::new(hmac));
    assert!(drive(&as_user, &server).is_err());
}

#[test]
fn plain_login_initial_token_and_round_trip() {
    let login = PlainLogin::new("svc", Secret::new("svc-pw"));
    assert_eq!(login.mechanism(), "PLAIN");
    let mut exchange = start_exchange(&login).unwrap();
    assert_eq!(exchange.initial().unwrap(), b"\0svc\0svc-pw");
    assert!(!exchange.is_complete());
    assert!(exchange.initial().is_err());

    let server = PlainServer::new(credentials());
    assert_eq!(drive(&login, &server).unwrap().authorization_id, "svc");
    let wrong = PlainLogin::new("svc", Secret::new("nope"));
    assert_eq!(
        drive(&wrong, &server).unwrap_err(),
        "Authentication failed: Invalid username or password"
    );
}

#[test]
fn plain_login_refuses_fields_it_cannot_encode() {
    for (user, password) in [("", "pw"), ("a\0b", "pw"), ("svc", ""), ("svc", "p\0w")] {
        let mut exchange = start_exchange(&PlainLogin::new(user, Secret::new(password))).unwrap();
        assert!(exchange.initial().is_err(), "{user:?}");
    }
    let mut exchange = start_exchange(&PlainLogin::new("svc", Secret::new("pw"))).unwrap();
    exchange.initial().unwrap();
    assert!(exchange.step(b"unexpected").is_err());
    assert!(!exchange.is_complete());
}

#[test]
fn login_module_by_name() {
    let creds = credentials();
    for name in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let module = login_module(name, "svc", Secret::new("svc-pw")).unwrap();
        assert_eq!(module.mechanism(), name);
        let server: Box<dyn SaslMechanism> = match ScramMechanism::from_mechanism_name(name) {
            Some(m) => Box::new(ScramServer::new(m, creds.clone(), Arc::new(NoTokens))),
            None => Box::new(PlainServer::new(creds.clone())),
        };
        assert_eq!(
            drive(module.as_ref(), server.as_ref())
                .unwrap()
                .authorization_id,
            "svc"
        );
    }
    let err = login_module("GSSAPI", "svc", Secret::new("pw"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("GSSAPI"));
}

#[test]
fn secrets_do_not_print() {
    let login = ScramLogin::new(ScramMechanism::Sha256, "svc", Secret::new("svc-pw"));
    assert!(!format!("{login:?}").contains("svc-pw"));
    let login = PlainLogin::new("svc", Secret::new("svc-pw"));
    assert!(!format!("{login:?}").contains("svc-pw"));
}

/// A module that only hands over a user name and password, as a dynamic login plugin does.
struct PasswordOnly {
    mechanism: &'static str,
    password: &'static str,
}

impl LoginModule for PasswordOnly {
    fn mechanism(&self) -> &str {
        self.mechanism
    }
    fn credential(&self) -> ExpiringCredential {
        ExpiringCredential::non_expiring("svc")
    }
    fn start(&self) -> Result<ClientExchange, LoginError> {
        Ok(ClientExchange::Password {
            username: "svc".to_owned(),
            password: Secret::new(self.password),
        })
    }
}

#[test]
fn a_module_that_hands_over_a_password_gets_the_built_in_client() {
    let creds = credentials();
    for (name, server) in [
        (
            "SCRAM-SHA-512",
            Box::new(ScramServer::new(
                ScramMechanism::Sha512,
                Arc::clone(&creds) as _,
                Arc::new(NoTokens),
            )) as Box<dyn SaslMechanism>,
        ),
        ("PLAIN", Box::new(PlainServer::new(Arc::clone(&creds) as _))),
    ] {
        let good = PasswordOnly {
            mechanism: name,
            password: "svc-pw",
        };
        assert_eq!(
            drive(&good, server.as_ref()).unwrap().authorization_id,
            "svc"
        );
        let resolved = ResolvedLogin::new(Arc::new(good));
        assert!(matches!(resolved.start(), Ok(ClientExchange::Custom(_))));
        assert_eq!(
            drive(&resolved, server.as_ref()).unwrap().authorization_id,
            "svc"
        );
        let bad = PasswordOnly {
            mechanism: name,
            password: "wrong",
        };
        assert!(drive(&bad, server.as_ref()).is_err());
    }
    let unknown = PasswordOnly {
        mechanism: "X-OTHER",
        password: "pw",
    };
    assert!(start_exchange(&unknown).is_err());
}
