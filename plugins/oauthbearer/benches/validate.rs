//! One OAUTHBEARER token validation with the key already in the cached key set (the hot path of
//! a login: split, header, key lookup, signature, claims), per algorithm; the RFC 7628 framing
//! parse; and a whole server exchange with RS256.
//!
//! Keys are made before timing; every token verifies (asserted), so a refusal cannot pass for a
//! fast validation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a benchmark's setup reports a failure by panicking"
)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use criterion::{criterion_group, criterion_main, Criterion};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::EncodePrivateKey as _;
use portcullis_plugin_api::sasl::{ExchangeContext, SaslExchange, StepOutcome};
use portcullis_plugin_oauthbearer::framing::parse_client_initial_response;
use portcullis_plugin_oauthbearer::jwks::{JwksValidator, KeySet, NoRefresh, SharedKeySet};
use portcullis_plugin_oauthbearer::unsecured::{UnsecuredRules, UnsecuredValidator};
use portcullis_plugin_oauthbearer::{
    ClaimRules, OAuthBearerServer, ServerSettings, TokenValidator,
};
use rsa::pkcs1::EncodeRsaPrivateKey as _;
use rsa::traits::PublicKeyParts as _;
use serde_json::{json, Value};

const NOW: i64 = 1_700_000_000_000;
const ISSUER: &str = "https://idp.example/realms/kafka";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).unwrap();
    bytes
}

/// (signing key, public JWK) for RSA-2048, P-256 and Ed25519.
fn keys() -> Vec<(&'static str, Algorithm, EncodingKey, Value)> {
    let rsa = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).unwrap();
    let public = rsa.to_public_key();
    let p256 = p256::ecdsa::SigningKey::from_slice(&random::<32>()).unwrap();
    let point = p256.verifying_key().to_sec1_point(false);
    let ed = ed25519_dalek::SigningKey::from_bytes(&random::<32>());
    vec![
        (
            "RS256",
            Algorithm::RS256,
            EncodingKey::from_rsa_der(rsa.to_pkcs1_der().unwrap().as_bytes()),
            json!({"kty": "RSA", "kid": "rsa", "n": b64(&public.n_bytes()), "e": b64(&public.e_bytes())}),
        ),
        (
            "ES256",
            Algorithm::ES256,
            EncodingKey::from_ec_der(p256.to_pkcs8_der().unwrap().as_bytes()),
            json!({"kty": "EC", "kid": "p256", "crv": "P-256",
                   "x": b64(&point.as_bytes()[1..33]), "y": b64(&point.as_bytes()[33..65])}),
        ),
        (
            "EdDSA",
            Algorithm::EdDSA,
            EncodingKey::from_ed_der(ed.to_pkcs8_der().unwrap().as_bytes()),
            json!({"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": b64(&ed.verifying_key().to_bytes())}),
        ),
    ]
}

/// A Keycloak-sized access token's claims.
fn claims() -> Value {
    json!({
        "exp": NOW / 1000 + 300, "iat": NOW / 1000 - 5, "jti": "0b5a7c1e-2f0e-4a8e-9a59-7c1f4f3f2d11",
        "iss": ISSUER, "aud": ["kafka", "account"], "sub": "5f0c6a1e-4b3d-4c55-8a0e-1f2d3c4b5a69",
        "typ": "Bearer", "azp": "kafka-client", "scope": "openid profile email kafka",
        "groups": ["readers", "payments"], "preferred_username": "service-account-kafka-client",
        "realm_access": {"roles": ["offline_access", "uma_authorization"]},
    })
}

fn validation(c: &mut Criterion) {
    let keys = keys();
    let jwks: Vec<Value> = keys.iter().map(|(_, _, _, jwk)| jwk.clone()).collect();
    let set = KeySet::from_json(json!({ "keys": jwks }).to_string().as_bytes()).unwrap();
    let shared = Arc::new(SharedKeySet::new(set));
    let rules = ClaimRules {
        expected_audience: vec!["kafka".into()],
        expected_issuer: Some(ISSUER.into()),
        groups_claim_name: Some("groups".into()),
        ..ClaimRules::default()
    };
    let validator = Arc::new(JwksValidator::new(
        Arc::clone(&shared),
        rules,
        Arc::new(NoRefresh),
    ));
    let mut rs256_token = String::new();
    for (name, alg, key, jwk) in &keys {
        let mut header = Header::new(*alg);
        header.kid = jwk["kid"].as_str().map(str::to_owned);
        let token = jsonwebtoken::encode(&header, &claims(), key).unwrap();
        assert!(validator.validate(&token, NOW).is_ok(), "{name}");
        if *name == "RS256" {
            rs256_token = token.clone();
        }
        c.bench_function(&format!("jwks validate {name} (cached key)"), |b| {
            b.iter(|| assert!(validator.validate(black_box(&token), NOW).is_ok()))
        });
    }

    // The same claims through the unsecured validator: everything but the signature (split,
    // base64, strict JSON, claim rules), to show what the crypto leaves to the rest.
    let unsecured = UnsecuredValidator::new(UnsecuredRules::default());
    let none_token = format!(
        "{}.{}.",
        b64(br#"{"alg":"none"}"#),
        b64(claims().to_string().as_bytes())
    );
    assert!(unsecured.validate(&none_token, NOW).is_ok());
    c.bench_function("unsecured validate (no signature)", |b| {
        b.iter(|| assert!(unsecured.validate(black_box(&none_token), NOW).is_ok()))
    });

    let message =
        format!("n,,\u{1}auth=Bearer {rs256_token}\u{1}traceId=abc\u{1}\u{1}").into_bytes();
    c.bench_function("framing parse (RS256 token)", |b| {
        b.iter(|| assert!(parse_client_initial_response(black_box(&message)).is_ok()))
    });

    let server = OAuthBearerServer::new(validator, ServerSettings::default());
    let context = ExchangeContext::new(IpAddr::V4(Ipv4Addr::LOCALHOST), "bench", NOW);
    c.bench_function("server exchange RS256", |b| {
        b.iter(|| {
            let mut exchange = server.start_exchange(&context);
            assert!(matches!(
                exchange.step(black_box(&message)),
                StepOutcome::Complete(_)
            ));
        })
    });
}

criterion_group!(benches, validation);
criterion_main!(benches);
