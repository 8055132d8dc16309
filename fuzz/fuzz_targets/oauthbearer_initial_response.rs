//! RFC 7628 client initial responses into the framing parser and the OAUTHBEARER server exchange.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use portcullis::sasl::{AuthFailure, ExchangeContext, SaslExchange, StepOutcome};
use portcullis_plugin_oauthbearer::framing::{parse_client_initial_response, AUTH_KEY};
use portcullis_plugin_oauthbearer::{
    OAuthBearerServer, Refusal, ServerSettings, TokenValidator, ValidatedToken, MAX_TOKEN_LEN,
};

/// Accepts a token `good.<name>` as `<name>` (so authzid checks run), refuses the rest.
struct Fake;

impl TokenValidator for Fake {
    fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal> {
        match token.strip_prefix("good.") {
            Some(name) => Ok(ValidatedToken {
                principal: name.to_owned(),
                expiry_ms: now_ms + 1,
                ..ValidatedToken::default()
            }),
            None => Err(Refusal::insufficient_scope("fuzz", "s")),
        }
    }
}

fn server() -> &'static OAuthBearerServer {
    static SERVER: OnceLock<OAuthBearerServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        OAuthBearerServer::new(
            Arc::new(Fake),
            ServerSettings {
                openid_configuration: Some("https://idp/.well-known/openid-configuration".into()),
            },
        )
    })
}

/// Kafka's `OAuthBearerClientInitialResponse.toBytes`.
fn to_bytes(authzid: &str, token: &str, extensions: &[(String, String)]) -> Vec<u8> {
    let mut out = String::from("n,");
    if !authzid.is_empty() {
        out.push_str("a=");
        out.push_str(authzid);
    }
    out.push_str(",\u{1}auth=Bearer ");
    out.push_str(token);
    for (k, v) in extensions {
        out.push('\u{1}');
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out.push_str("\u{1}\u{1}");
    out.into_bytes()
}

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = parse_client_initial_response(data) {
        // What Kafka's grammar allows, and nothing else.
        assert!(data.is_ascii());
        assert!(!parsed.token.is_empty());
        assert!(!parsed.token.starts_with('='));
        assert!(parsed
            .token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_~+/.=".contains(&b)));
        assert!(!parsed.extensions.contains_key(AUTH_KEY));
        for (k, v) in &parsed.extensions {
            assert!(!k.is_empty() && k.bytes().all(|b| b.is_ascii_alphabetic()));
            assert!(!v.is_empty() && !v.contains('\u{1}'));
        }
        // Re-encoding as a Kafka client would and parsing again gives the same message.
        let ext: Vec<(String, String)> = parsed.extensions.clone().into_iter().collect();
        let again =
            parse_client_initial_response(&to_bytes(&parsed.authorization_id, &parsed.token, &ext));
        assert_eq!(again.as_ref(), Ok(&parsed));
    }

    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "fuzz", 0);
    let mut exchange = server().start_exchange(&context);
    match exchange.step(data) {
        StepOutcome::Complete(done) => {
            // Only a well-formed message whose token the fake accepts, for its own principal.
            let token = parse_client_initial_response(data).map(|p| p.token);
            assert_eq!(token, Ok(format!("good.{}", done.authorization_id)));
            assert_eq!(done.credential_expiry_ms, Some(1));
        }
        StepOutcome::Continue(challenge) => {
            // The fake's refusal, or the size bound's (checked before any validator runs).
            let oversize =
                parse_client_initial_response(data).is_ok_and(|p| p.token.len() > MAX_TOKEN_LEN);
            let expected: &[u8] = if oversize {
                br#"{"status":"invalid_token", "openid-configuration":"https://idp/.well-known/openid-configuration"}"#
            } else {
                br#"{"status":"insufficient_scope", "scope":"s", "openid-configuration":"https://idp/.well-known/openid-configuration"}"#
            };
            assert_eq!(challenge, expected);
            // Only %x01 turns the challenge into the client-visible failure.
            let outcome = exchange.step(data);
            match outcome {
                StepOutcome::Fail(AuthFailure::Visible(m)) => {
                    assert_eq!(data, b"\x01");
                    assert_eq!(m.as_bytes(), challenge.as_slice());
                }
                StepOutcome::Fail(AuthFailure::Hidden(_)) => assert_ne!(data, b"\x01"),
                other => panic!("after the challenge: {other:?}"),
            }
        }
        // Malformed framing is hidden; an authzid that is not the principal is visible.
        StepOutcome::Fail(AuthFailure::Hidden(_)) => {
            assert!(parse_client_initial_response(data).is_err())
        }
        StepOutcome::Fail(AuthFailure::Visible(m)) => assert!(m.contains("authorization id")),
        other => panic!("unknown outcome {other:?}"),
    }
    assert!(matches!(exchange.step(b"\x01"), StepOutcome::Fail(_)));
});
