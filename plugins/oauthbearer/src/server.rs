//! The OAUTHBEARER server (Kafka's `OAuthBearerSaslServer`): one client initial response, then
//! either success, or an error challenge that the client acknowledges with `%x01` before the
//! failure (RFC 7628 §3.2.3).

use std::sync::Arc;

use portcullis_plugin_api::credentials::CredentialId;
use portcullis_plugin_api::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
    TokenClaims,
};

use crate::framing::{error_challenge, parse_client_initial_response};
use crate::validator::{Refusal, TokenValidator};
use crate::{MAX_TOKEN_LEN, MECHANISM_NAME};

/// The server's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerSettings {
    /// The OpenID discovery URL put in every error challenge (`openid-configuration`), when set.
    pub openid_configuration: Option<String>,
}

/// The SASL/OAUTHBEARER server.
pub struct OAuthBearerServer {
    validator: Arc<dyn TokenValidator>,
    settings: Arc<ServerSettings>,
}

impl OAuthBearerServer {
    /// A server validating tokens with `validator`.
    pub fn new(validator: Arc<dyn TokenValidator>, settings: ServerSettings) -> Self {
        Self {
            validator,
            settings: Arc::new(settings),
        }
    }

    /// Starts an exchange with the concrete type (the trait method boxes it).
    pub fn start_exchange(&self, context: &ExchangeContext) -> OAuthBearerExchange {
        OAuthBearerExchange {
            validator: Arc::clone(&self.validator),
            settings: Arc::clone(&self.settings),
            now_ms: context.now_ms,
            state: State::ExpectInitialResponse,
        }
    }
}

impl std::fmt::Debug for OAuthBearerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBearerServer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl SaslMechanism for OAuthBearerServer {
    fn name(&self) -> &str {
        MECHANISM_NAME
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(self.start_exchange(context))
    }

    fn steps_are_cheap(&self) -> bool {
        self.validator.is_cheap()
    }
}

/// One OAUTHBEARER exchange.
pub struct OAuthBearerExchange {
    validator: Arc<dyn TokenValidator>,
    settings: Arc<ServerSettings>,
    now_ms: i64,
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for the client initial response.
    ExpectInitialResponse,
    /// The token was refused and the challenge sent; waiting for the client's `%x01`. Holds the
    /// challenge's JSON, which becomes the failure message the client sees.
    ExpectErrorAck { message: String },
    /// Complete or failed.
    Finished,
}

/// The single byte a client answers an error challenge with.
const CONTROL_A: u8 = 0x01;

impl SaslExchange for OAuthBearerExchange {
    fn step(&mut self, client_token: &[u8]) -> StepOutcome {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::ExpectInitialResponse => self.initial_response(client_token),
            // Kafka fails with the JSON as a SaslAuthenticationException, so the client sees it.
            State::ExpectErrorAck { message } if client_token == [CONTROL_A] => {
                StepOutcome::Fail(AuthFailure::Visible(message))
            }
            // Kafka would parse anything else as a new initial response; a client that does not
            // follow RFC 7628 gets a plain failure instead of a second try on this exchange.
            State::ExpectErrorAck { .. } => StepOutcome::Fail(AuthFailure::Hidden(
                "OAUTHBEARER client did not answer the error challenge with %x01".to_owned(),
            )),
            State::Finished => StepOutcome::Fail(AuthFailure::Hidden(
                "OAUTHBEARER exchange stepped after it finished".to_owned(),
            )),
        }
    }
}

impl OAuthBearerExchange {
    fn initial_response(&mut self, client_token: &[u8]) -> StepOutcome {
        // Malformed framing is a SaslException in Kafka: the client sees the generic message.
        let response = match parse_client_initial_response(client_token) {
            Ok(response) => response,
            Err(e) => return StepOutcome::Fail(AuthFailure::Hidden(e.to_string())),
        };
        let validated = if response.token.len() > MAX_TOKEN_LEN {
            Err(Refusal::invalid_token(format!(
                "token of {} bytes is over the {MAX_TOKEN_LEN}-byte limit",
                response.token.len()
            )))
        } else {
            self.validator.validate(&response.token, self.now_ms)
        };
        let token = match validated {
            Ok(token) => token,
            Err(refusal) => {
                let challenge = error_challenge(
                    refusal.status,
                    refusal.scope.as_deref(),
                    self.settings.openid_configuration.as_deref(),
                );
                self.state = State::ExpectErrorAck {
                    message: String::from_utf8_lossy(&challenge).into_owned(),
                };
                return StepOutcome::Continue(challenge);
            }
        };
        // The client may name an authorization id, but only its own (CVE-2017-12610's lesson).
        if !response.authorization_id.is_empty() && response.authorization_id != token.principal {
            return StepOutcome::Fail(AuthFailure::Visible(format!(
                "Authentication failed: Client requested an authorization id ({}) that is different from the token's principal name ({})",
                response.authorization_id, token.principal
            )));
        }
        // Every validator accepts every extension, as Kafka's do: they become negotiated
        // properties.
        let credential = CredentialId::plugin(MECHANISM_NAME, token.principal.clone());
        StepOutcome::Complete(
            Authenticated::new(token.principal)
                .with_credential_expiry_ms(Some(token.expiry_ms))
                .with_extensions(response.extensions)
                .with_token_claims(TokenClaims::new(token.scopes, token.groups, token.jti))
                .with_credential(credential),
        )
    }
}

impl std::fmt::Debug for OAuthBearerExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBearerExchange")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use jsonwebtoken::Algorithm;
    use serde_json::json;

    use super::*;
    use crate::jwks::{JwksValidator, KeySet, NoRefresh, SharedKeySet};
    use crate::test_keys;
    use crate::validator::ValidatedToken;
    use crate::ClaimRules;

    const NOW: i64 = 1_700_000_000_000;

    /// Accepts `good-<name>` as principal `<name>`, refuses `scope` with insufficient_scope and
    /// everything else with invalid_token.
    struct Fake {
        cheap: bool,
    }

    impl TokenValidator for Fake {
        fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal> {
            match token.strip_prefix("good-") {
                Some(name) => Ok(ValidatedToken {
                    principal: name.to_owned(),
                    expiry_ms: now_ms + 60_000,
                    issued_at_ms: Some(now_ms),
                    scopes: vec!["kafka".into()],
                    groups: vec!["readers".into()],
                    jti: Some("id-9".into()),
                }),
                None if token == "scope" => Err(Refusal::insufficient_scope("no", "kafka:write")),
                None => Err(Refusal::invalid_token("bad")),
            }
        }

        fn is_cheap(&self) -> bool {
            self.cheap
        }
    }

    fn server(openid: Option<&str>) -> OAuthBearerServer {
        OAuthBearerServer::new(
            Arc::new(Fake { cheap: true }),
            ServerSettings {
                openid_configuration: openid.map(str::to_owned),
            },
        )
    }

    fn context() -> ExchangeContext {
        ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "test", NOW)
    }

    fn message(authzid: &str, token: &str, extensions: &str) -> Vec<u8> {
        let authzid = if authzid.is_empty() {
            String::new()
        } else {
            format!("a={authzid}")
        };
        format!("n,{authzid},\u{1}auth=Bearer {token}\u{1}{extensions}\u{1}").into_bytes()
    }

    #[test]
    fn success_carries_lifetime_extensions_and_claims() {
        let s = server(None);
        assert_eq!(s.name(), "OAUTHBEARER");
        assert!(s.steps_are_cheap());
        let mut e = s.start(&context());
        let StepOutcome::Complete(done) = e.step(&message("", "good-alice", "traceId=42\u{1}"))
        else {
            panic!("expected success");
        };
        assert_eq!(done.authorization_id, "alice");
        assert!(done.server_final.is_empty());
        assert_eq!(done.credential_expiry_ms, Some(NOW + 60_000));
        assert_eq!(
            done.extensions.get("traceId").map(String::as_str),
            Some("42")
        );
        assert!(!done.extensions.contains_key("auth"));
        assert_eq!(
            done.token_claims,
            Some(TokenClaims::new(
                vec!["kafka".into()],
                vec!["readers".into()],
                Some("id-9".into())
            ))
        );
        assert_eq!(
            done.credential,
            Some(CredentialId::plugin("OAUTHBEARER", "alice"))
        );
        assert!(matches!(
            e.step(b"\x01"),
            StepOutcome::Fail(AuthFailure::Hidden(_))
        ));
    }

    #[test]
    fn refusal_is_a_challenge_then_the_json_failure() {
        let mut e = server(None).start_exchange(&context());
        let StepOutcome::Continue(challenge) = e.step(&message("", "bad", "")) else {
            panic!("expected a challenge");
        };
        assert_eq!(challenge, br#"{"status":"invalid_token"}"#);
        match e.step(b"\x01") {
            StepOutcome::Fail(AuthFailure::Visible(m)) => {
                assert_eq!(m, r#"{"status":"invalid_token"}"#)
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            e.step(b"\x01"),
            StepOutcome::Fail(AuthFailure::Hidden(_))
        ));

        let mut e =
            server(Some("https://idp/.well-known/openid-configuration")).start_exchange(&context());
        let StepOutcome::Continue(challenge) = e.step(&message("", "scope", "")) else {
            panic!("expected a challenge");
        };
        assert_eq!(
            String::from_utf8(challenge).unwrap(),
            r#"{"status":"insufficient_scope", "scope":"kafka:write", "openid-configuration":"https://idp/.well-known/openid-configuration"}"#
        );
        // Anything but %x01 after the challenge fails without the JSON.
        assert!(matches!(
            e.step(&message("", "good-alice", "")),
            StepOutcome::Fail(AuthFailure::Hidden(_))
        ));
    }

    #[test]
    fn oversize_token_gets_the_challenge() {
        let mut e = server(None).start_exchange(&context());
        let token = format!("good-{}", "a".repeat(crate::MAX_TOKEN_LEN));
        assert!(matches!(
            e.step(&message("", &token, "")),
            StepOutcome::Continue(_)
        ));
        assert!(matches!(
            e.step(b"\x01"),
            StepOutcome::Fail(AuthFailure::Visible(_))
        ));
    }

    #[test]
    fn malformed_framing_is_a_hidden_failure() {
        for bad in [
            &b""[..],
            b"\x01",
            b"n,,\x01auth=Basic x\x01\x01",
            b"n,,\x01\x01",
            b"garbage",
        ] {
            let mut e = server(None).start_exchange(&context());
            match e.step(bad) {
                StepOutcome::Fail(f @ AuthFailure::Hidden(_)) => assert_eq!(
                    f.client_message("OAUTHBEARER", false),
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"
                ),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn authzid_must_be_the_principal() {
        let mut e = server(None).start_exchange(&context());
        assert!(matches!(
            e.step(&message("alice", "good-alice", "")),
            StepOutcome::Complete(_)
        ));
        let mut e = server(None).start_exchange(&context());
        match e.step(&message("admin", "good-alice", "")) {
            StepOutcome::Fail(AuthFailure::Visible(m)) => assert_eq!(
                m,
                "Authentication failed: Client requested an authorization id (admin) that is different from the token's principal name (alice)"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cheapness_follows_the_validator() {
        let s = OAuthBearerServer::new(Arc::new(Fake { cheap: false }), ServerSettings::default());
        assert!(!s.steps_are_cheap());
    }

    /// KIP-368: the client re-authenticates on the same connection with a fresh token of the
    /// same principal; each exchange reports its own token's expiry.
    #[test]
    fn reauthentication_with_a_new_token() {
        let key = test_keys::ed25519();
        let keys = Arc::new(SharedKeySet::new(
            KeySet::from_json(&test_keys::key_set(&[key.jwk(Some("k"))])).unwrap(),
        ));
        let validator = JwksValidator::new(
            keys,
            ClaimRules {
                expected_audience: vec!["kafka".into()],
                ..ClaimRules::default()
            },
            Arc::new(NoRefresh),
        );
        let s = OAuthBearerServer::new(Arc::new(validator), ServerSettings::default());
        let token = |iat: i64, lifetime: i64| {
            key.sign(
                Algorithm::EdDSA,
                Some("k"),
                &json!({"sub": "svc", "aud": "kafka", "iat": iat / 1000, "exp": (iat + lifetime) / 1000}),
            )
        };
        let first = token(NOW, 15_000);
        let StepOutcome::Complete(a) = s.start(&context()).step(&message("", &first, "")) else {
            panic!("first login");
        };
        assert_eq!(a.credential_expiry_ms, Some(NOW + 15_000));
        let later = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "test", NOW + 12_000);
        let second = token(NOW + 11_000, 15_000);
        let StepOutcome::Complete(b) = s.start(&later).step(&message("svc", &second, "")) else {
            panic!("re-authentication");
        };
        assert_eq!(b.authorization_id, a.authorization_id);
        assert_eq!(b.credential_expiry_ms, Some(NOW + 26_000));
        // The first token, long expired, no longer logs in.
        let much_later =
            ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "test", NOW + 60_000);
        assert!(matches!(
            s.start(&much_later).step(&message("", &first, "")),
            StepOutcome::Continue(_)
        ));
    }
}
