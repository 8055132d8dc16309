//! Arbitrary JWKS documents into `KeySet::from_json`, then a signed token against the set.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use portcullis_plugin_oauthbearer::jwks::{
    JwksValidator, KeySet, NoRefresh, SharedKeySet, MAX_KEYS,
};
use portcullis_plugin_oauthbearer::{ClaimRules, TokenValidator};

#[path = "oauthbearer_keys.rs"]
mod keys;

fn validator() -> &'static (Arc<SharedKeySet>, JwksValidator) {
    static V: OnceLock<(Arc<SharedKeySet>, JwksValidator)> = OnceLock::new();
    V.get_or_init(|| {
        let shared = Arc::new(SharedKeySet::default());
        let rules = ClaimRules {
            expected_audience: vec!["kafka".into()],
            ..ClaimRules::default()
        };
        let validator = JwksValidator::new(Arc::clone(&shared), rules, Arc::new(NoRefresh));
        // The oracle below is only worth something if the real set accepts the token.
        let Ok(real) = KeySet::from_json(keys::JWKS.as_bytes()) else {
            panic!("the fixed key set parses");
        };
        shared.store(real);
        assert!(validator.validate(keys::TOKEN, keys::NOW_MS).is_ok());
        (shared, validator)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(set) = KeySet::from_json(data) else {
        return;
    };
    assert!(set.len() <= MAX_KEYS);
    assert!(set.kids().len() <= set.len());
    let (shared, validator) = validator();
    let known = set.kids().iter().any(|k| k == "rsa");
    shared.store(set);
    // Any set may hold the token's key (a fuzzer that found the RSA JWK); none may panic.
    let accepted = validator.validate(keys::TOKEN, keys::NOW_MS).is_ok();
    assert!(!accepted || known, "accepted without a key named rsa");
});
