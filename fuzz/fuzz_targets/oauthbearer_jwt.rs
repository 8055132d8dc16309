//! Arbitrary tokens into the JWKS validator's decode path (split, header, key choice, signature,
//! claims) with a fixed key set, into the unsecured validator, and (as an introspection answer)
//! into the claim rules.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use portcullis_plugin_oauthbearer::introspection::{
    CacheSettings, Introspect, IntrospectError, IntrospectionValidator,
};
use portcullis_plugin_oauthbearer::jwks::{JwksValidator, KeySet, NoRefresh, SharedKeySet};
use portcullis_plugin_oauthbearer::unsecured::{UnsecuredRules, UnsecuredValidator};
use portcullis_plugin_oauthbearer::{ClaimRules, TokenValidator, ValidatedToken};

#[path = "oauthbearer_keys.rs"]
mod keys;

struct Validators {
    jwks: JwksValidator,
    unsecured: UnsecuredValidator,
    introspection: IntrospectionValidator,
}

/// Answers an introspection with the token itself parsed as JSON.
struct Echo;

impl Introspect for Echo {
    fn introspect(
        &self,
        token: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>, IntrospectError> {
        serde_json::from_str(token).map_err(|e| IntrospectError::InvalidResponse(e.to_string()))
    }
}

fn rules() -> ClaimRules {
    ClaimRules {
        expected_audience: vec!["kafka".into()],
        expected_issuer: Some("https://idp".into()),
        groups_claim_name: Some("groups".into()),
        required_claims: [("tenant".to_owned(), serde_json::json!("acme"))]
            .into_iter()
            .collect(),
        required_scopes: vec!["a".into()],
        ..ClaimRules::default()
    }
}

fn validators() -> &'static Validators {
    static V: OnceLock<Validators> = OnceLock::new();
    V.get_or_init(|| {
        let Ok(set) = KeySet::from_json(keys::JWKS.as_bytes()) else {
            panic!("the fixed key set parses");
        };
        assert_eq!(set.len(), 4);
        let jwks = JwksValidator::new(
            Arc::new(SharedKeySet::new(set)),
            ClaimRules {
                required_claims: Default::default(),
                ..rules()
            },
            Arc::new(NoRefresh),
        );
        assert!(jwks.validate(keys::TOKEN, keys::NOW_MS).is_ok());
        Validators {
            jwks,
            unsecured: UnsecuredValidator::new(UnsecuredRules {
                required_scopes: vec!["a".into()],
                clock_skew_ms: 1000,
                ..UnsecuredRules::default()
            }),
            introspection: IntrospectionValidator::new(
                Arc::new(Echo),
                rules(),
                CacheSettings {
                    capacity: 64,
                    negative_capacity: 64,
                    ..CacheSettings::default()
                },
            ),
        }
    })
}

fn sane(t: &ValidatedToken, now: i64) {
    assert!(!t.principal.trim().is_empty());
    assert!(t.expiry_ms > now - 30_000);
    assert!(t.scopes.iter().all(|s| !s.trim().is_empty()));
    assert!(t.groups.iter().all(|g| !g.trim().is_empty()));
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let v = validators();
    let now = keys::NOW_MS;
    if let Ok(t) = v.jwks.validate(token, now) {
        // Nobody holds the private keys: only the fixed token's signing input can verify.
        let (input, _) = keys::TOKEN.rsplit_once('.').unwrap_or_default();
        assert!(token.starts_with(&format!("{input}.")), "forged: {token:?}");
        sane(&t, now);
    }
    if let Ok(t) = v.unsecured.validate(token, now) {
        assert!(t.expiry_ms > now - 1000);
        assert!(t.scopes.iter().any(|s| s == "a"));
    }
    if let Ok(t) = v.introspection.validate(token, now) {
        sane(&t, now);
        assert!(t.scopes.iter().any(|s| s == "a"));
    }
});
