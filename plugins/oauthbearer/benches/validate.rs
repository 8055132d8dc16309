//! One OAUTHBEARER token validation with the key already in the cached key set (the hot path of
//! a login: split, header, key lookup, signature, claims), per algorithm; ring's bare signature
//! verification of the same token (the floor under a validation); the RFC 7628 framing parse;
//! and a whole server exchange with RS256.
//!
//! Keys are made before timing; every token verifies (asserted), so a refusal cannot pass for a
//! fast validation.
//!
//! With `PORTCULLIS_OAUTH_BENCH_DIR` set, the group `shared/` also measures the key set and tokens
//! in that directory (written by `benches/oauth-validator-jmh`'s `MakeTokens`, the files Kafka's
//! validator reads in the same run; `scripts/bench-oauth.sh` runs both):
//!
//! - `DIR/jwks.json`, `DIR/<KIND>.jwt` (RS256, ES256, EdDSA: whichever exist), `DIR/principal`
//!   (the `sub` every token must validate to);
//! - `PORTCULLIS_OAUTH_BENCH_ISSUER` (default `https://idp.example/realms/kafka`) and
//!   `PORTCULLIS_OAUTH_BENCH_AUDIENCE` (default `kafka`): the expected issuer and audience;
//! - the tokens are checked against the real clock (they expire years ahead).
//!
//! `shared/validate <KIND>` is the validation, `shared/ring verify <KIND> (bare)` ring alone on the
//! token's signature, called as `src/jwks/verify.rs` calls it, and `shared/unsecured <KIND>
//! payload` the unsecured validator on the token's payload (all but the signature).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    reason = "a benchmark, not shipped: it reads its token files, reads the clock once for them, and reports a failure by panicking"
)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

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
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
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

/// A public key as ring takes it, from its JWK.
enum BareKey {
    /// Modulus and exponent, big-endian, without leading zeros (as `src/jwks/keyset.rs` keeps them).
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed SEC1 P-256 point.
    P256(Vec<u8>),
    /// A 32-byte Ed25519 key.
    Ed25519(Vec<u8>),
}

fn unb64(jwk: &Value, member: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD
        .decode(
            jwk[member]
                .as_str()
                .unwrap_or_else(|| panic!("JWK without {member}")),
        )
        .unwrap()
}

fn bare_key(jwk: &Value) -> BareKey {
    let strip = |v: Vec<u8>| v.into_iter().skip_while(|&b| b == 0).collect::<Vec<u8>>();
    match jwk["kty"].as_str() {
        Some("RSA") => BareKey::Rsa {
            n: strip(unb64(jwk, "n")),
            e: strip(unb64(jwk, "e")),
        },
        Some("EC") => {
            assert_eq!(jwk["crv"], "P-256");
            let mut point = vec![4];
            point.extend(unb64(jwk, "x"));
            point.extend(unb64(jwk, "y"));
            BareKey::P256(point)
        }
        Some("OKP") => BareKey::Ed25519(unb64(jwk, "x")),
        other => panic!("key type {other:?}"),
    }
}

/// ring alone: the same calls `src/jwks/verify.rs` makes for RS256, ES256 and EdDSA (the RSA
/// key is handed over as components on every call, as there).
fn bare_verify(key: &BareKey, message: &[u8], signature: &[u8]) -> bool {
    match key {
        BareKey::Rsa { n, e } => RsaPublicKeyComponents { n, e }
            .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, signature)
            .is_ok(),
        BareKey::P256(point) => UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
            .verify(message, signature)
            .is_ok(),
        BareKey::Ed25519(x) => UnparsedPublicKey::new(&signature::ED25519, x)
            .verify(message, signature)
            .is_ok(),
    }
}

/// A compact JWS's signing input and decoded signature.
fn signed_parts(token: &str) -> (Vec<u8>, Vec<u8>) {
    let (input, signature) = token.rsplit_once('.').unwrap();
    (
        input.as_bytes().to_vec(),
        URL_SAFE_NO_PAD.decode(signature).unwrap(),
    )
}

/// The same payload under an `alg: none` header, for the unsecured validator.
fn unsecured_twin(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap();
    format!("{}.{payload}.", b64(br#"{"alg":"none"}"#))
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
        // The floor: the signature alone, with ring, as the validator calls it.
        let key = bare_key(jwk);
        let (message, signature) = signed_parts(&token);
        assert!(bare_verify(&key, &message, &signature), "{name}");
        c.bench_function(&format!("ring verify {name} (bare)"), |b| {
            b.iter(|| {
                assert!(bare_verify(
                    &key,
                    black_box(&message),
                    black_box(&signature)
                ))
            })
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

/// The key set and tokens Kafka's validator reads in the same run (`scripts/bench-oauth.sh`).
fn shared(c: &mut Criterion) {
    let Some(dir) = std::env::var_os("PORTCULLIS_OAUTH_BENCH_DIR").map(PathBuf::from) else {
        return;
    };
    let read = |path: &Path| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let env_or =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let jwks: Value = serde_json::from_str(&read(&dir.join("jwks.json"))).unwrap();
    let principal = read(&dir.join("principal")).trim().to_owned();
    let set = KeySet::from_json(jwks.to_string().as_bytes()).unwrap();
    assert!(set.skipped().is_empty(), "{:?}", set.skipped());
    let rules = ClaimRules {
        expected_audience: vec![env_or("PORTCULLIS_OAUTH_BENCH_AUDIENCE", "kafka")],
        expected_issuer: Some(env_or("PORTCULLIS_OAUTH_BENCH_ISSUER", ISSUER)),
        groups_claim_name: Some("groups".into()),
        ..ClaimRules::default()
    };
    let validator =
        JwksValidator::new(Arc::new(SharedKeySet::new(set)), rules, Arc::new(NoRefresh));
    let unsecured = UnsecuredValidator::new(UnsecuredRules::default());
    // The tokens expire years ahead; one reading of the clock serves the whole run.
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();

    let mut group = c.benchmark_group("shared");
    let mut found = 0;
    for kind in ["RS256", "ES256", "EdDSA"] {
        let path = dir.join(format!("{kind}.jwt"));
        if !path.exists() {
            continue;
        }
        found += 1;
        let token = read(&path).trim().to_owned();
        let validated = validator
            .validate(&token, now)
            .unwrap_or_else(|r| panic!("{kind}: {r:?}"));
        assert_eq!(validated.principal, principal, "{kind}");
        group.bench_function(format!("validate {kind}"), |b| {
            b.iter(|| assert!(validator.validate(black_box(&token), now).is_ok()))
        });

        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], kind);
        let jwk = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == header["kid"])
            .unwrap_or_else(|| panic!("{kind}: no key {}", header["kid"]));
        let key = bare_key(jwk);
        let (message, signature) = signed_parts(&token);
        assert!(bare_verify(&key, &message, &signature), "{kind}");
        group.bench_function(format!("ring verify {kind} (bare)"), |b| {
            b.iter(|| {
                assert!(bare_verify(
                    &key,
                    black_box(&message),
                    black_box(&signature)
                ))
            })
        });

        let twin = unsecured_twin(&token);
        assert!(unsecured.validate(&twin, now).is_ok(), "{kind}");
        group.bench_function(format!("unsecured {kind} payload"), |b| {
            b.iter(|| assert!(unsecured.validate(black_box(&twin), now).is_ok()))
        });
    }
    group.finish();
    assert!(found > 0, "no RS256/ES256/EdDSA .jwt in {}", dir.display());
}

criterion_group!(benches, validation, shared);
criterion_main!(benches);
