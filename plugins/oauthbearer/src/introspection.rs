//! The introspection validator (RFC 7662): opaque tokens are asked about at the identity
//! provider's endpoint through the host's blocking HTTP client ([`Introspect`]).
//!
//! The response must say `"active": true`; then the [`ClaimRules`] apply as for a JWT, with two
//! differences: `iat` is optional (RFC 7662 makes every member but `active` optional), and the
//! principal is the sub claim or, when the response has none, RFC 7662's `username`. `exp` stays
//! required: it is the KIP-368 credential lifetime. A scope string is split on spaces (RFC 7662
//! §2.2 writes scopes so).
//!
//! Answers are cached, keyed by the SHA-256 of the token (never the token): a positive entry
//! lives until the token's `exp` or the positive TTL, whichever is first; a definitive refusal
//! (inactive, or claims that do not pass) for the negative TTL. A failed call to the endpoint is
//! not cached. Both caches are bounded; when full, expired entries go first, then the entry
//! closest to expiry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::claims::{self, ClaimRules, Source};
use crate::validator::{Refusal, TokenValidator, ValidatedToken};
use crate::MAX_TOKEN_LEN;

/// Why the host could not get an answer from the introspection endpoint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IntrospectError {
    /// The request did not complete (connection, TLS, timeout).
    #[error("introspection request failed: {0}")]
    Transport(String),
    /// The endpoint answered with an HTTP status other than 200.
    #[error("introspection endpoint answered HTTP {0}")]
    Status(u16),
    /// The body was not a JSON object.
    #[error("introspection response is not a JSON object: {0}")]
    InvalidResponse(String),
}

/// The host's side: a blocking HTTP POST of the token to the RFC 7662 endpoint, authenticated
/// with the configured client id and secret, returning the response's JSON object.
pub trait Introspect: Send + Sync {
    /// Introspects `token`.
    fn introspect(&self, token: &str) -> Result<Map<String, Value>, IntrospectError>;
}

/// The caches' sizes and lifetimes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// Most active tokens remembered (0 disables the positive cache).
    pub capacity: usize,
    /// Longest an active answer is reused, in ms (it never outlives the token's `exp`).
    pub positive_ttl_ms: i64,
    /// Most refused tokens remembered (0 disables the negative cache).
    pub negative_capacity: usize,
    /// How long a refusal is reused, in ms (0 disables the negative cache).
    pub negative_ttl_ms: i64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            positive_ttl_ms: 60_000,
            negative_capacity: 10_000,
            negative_ttl_ms: 10_000,
        }
    }
}

type Digest32 = [u8; 32];

/// A bounded map from token digests to answers with an expiry.
#[derive(Debug)]
struct Cache<T> {
    capacity: usize,
    entries: Mutex<HashMap<Digest32, (T, i64)>>,
}

impl<T: Clone> Cache<T> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &Digest32, now_ms: i64) -> Option<T> {
        // Every operation leaves the map whole, so a poisoned lock is still usable.
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some((value, expires)) if now_ms < *expires => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&self, key: Digest32, value: T, expires_ms: i64, now_ms: i64) {
        if self.capacity == 0 || expires_ms <= now_ms {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| now_ms < *expires);
            if entries.len() >= self.capacity {
                let soonest = entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| *k);
                if let Some(soonest) = soonest {
                    entries.remove(&soonest);
                }
            }
        }
        entries.insert(key, (value, expires_ms));
    }

    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Validates opaque tokens by introspection.
pub struct IntrospectionValidator {
    client: Arc<dyn Introspect>,
    rules: ClaimRules,
    settings: CacheSettings,
    positive: Cache<ValidatedToken>,
    negative: Cache<Refusal>,
}

impl IntrospectionValidator {
    /// A validator asking `client`, checking `rules`, caching as `cache` says.
    pub fn new(client: Arc<dyn Introspect>, rules: ClaimRules, cache: CacheSettings) -> Self {
        Self {
            client,
            rules,
            positive: Cache::new(cache.capacity),
            negative: Cache::new(cache.negative_capacity),
            settings: cache,
        }
    }

    /// How many answers each cache holds (positive, negative), expired ones included until they
    /// are next touched.
    pub fn cached(&self) -> (usize, usize) {
        (self.positive.len(), self.negative.len())
    }

    fn check(&self, response: &Map<String, Value>, now_ms: i64) -> Result<ValidatedToken, Refusal> {
        if response.get("active") != Some(&Value::Bool(true)) {
            return Err(Refusal::invalid_token("the token is not active"));
        }
        claims::check(&self.rules, response, now_ms, Source::Introspection)
    }
}

impl std::fmt::Debug for IntrospectionValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionValidator")
            .field("rules", &self.rules)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TokenValidator for IntrospectionValidator {
    fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(Refusal::invalid_token(format!(
                "token of {} bytes is over the {MAX_TOKEN_LEN}-byte limit",
                token.len()
            )));
        }
        let key: Digest32 = Sha256::digest(token.as_bytes()).into();
        // A positive entry expires at the token's `exp` at the latest.
        if let Some(hit) = self.positive.get(&key, now_ms) {
            return Ok(hit);
        }
        if let Some(refusal) = self.negative.get(&key, now_ms) {
            return Err(refusal);
        }
        let response = self
            .client
            .introspect(token)
            .map_err(|e| Refusal::invalid_token(e.to_string()))?;
        match self.check(&response, now_ms) {
            Ok(validated) => {
                let expires = validated
                    .expiry_ms
                    .min(now_ms.saturating_add(self.settings.positive_ttl_ms));
                self.positive
                    .insert(key, validated.clone(), expires, now_ms);
                Ok(validated)
            }
            Err(refusal) => {
                let expires = now_ms.saturating_add(self.settings.negative_ttl_ms);
                self.negative.insert(key, refusal.clone(), expires, now_ms);
                Err(refusal)
            }
        }
    }

    fn is_cheap(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::validator::RefusalStatus;

    const NOW: i64 = 1_700_000_000_000;

    /// An endpoint answering from a table, counting calls, and checking it is never handed a
    /// token it did not expect.
    struct Fake {
        answers: HashMap<String, Result<Value, IntrospectError>>,
        calls: AtomicUsize,
    }

    impl Introspect for Fake {
        fn introspect(&self, token: &str) -> Result<Map<String, Value>, IntrospectError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            match self.answers.get(token) {
                Some(Ok(Value::Object(m))) => Ok(m.clone()),
                Some(Ok(_)) => Err(IntrospectError::InvalidResponse("not an object".into())),
                Some(Err(e)) => Err(e.clone()),
                None => Ok(json!({"active": false}).as_object().cloned().unwrap()),
            }
        }
    }

    fn fake() -> Arc<Fake> {
        let exp = NOW / 1000 + 300;
        Arc::new(Fake {
            answers: [
                ("good", Ok(json!({"active": true, "sub": "alice", "exp": exp, "scope": "kafka openid", "aud": "kafka", "iss": "https://idp"}))),
                ("user", Ok(json!({"active": true, "username": "bob", "exp": exp, "aud": ["kafka"], "iss": "https://idp"}))),
                ("short", Ok(json!({"active": true, "sub": "carol", "exp": NOW / 1000 + 5, "aud": "kafka", "iss": "https://idp"}))),
                ("noexp", Ok(json!({"active": true, "sub": "dave", "aud": "kafka", "iss": "https://idp"}))),
                ("wrongaud", Ok(json!({"active": true, "sub": "erin", "exp": exp, "aud": "other", "iss": "https://idp"}))),
                ("activestr", Ok(json!({"active": "true", "sub": "frank", "exp": exp}))),
                ("down", Err(IntrospectError::Status(503))),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
            calls: AtomicUsize::new(0),
        })
    }

    fn rules() -> ClaimRules {
        ClaimRules {
            expected_audience: vec!["kafka".into()],
            expected_issuer: Some("https://idp".into()),
            ..ClaimRules::default()
        }
    }

    #[test]
    fn active_tokens_and_principal_fallback() {
        let client = fake();
        let v = IntrospectionValidator::new(client.clone(), rules(), CacheSettings::default());
        assert!(!v.is_cheap());
        let t = v.validate("good", NOW).unwrap();
        assert_eq!(t.principal, "alice");
        assert_eq!(t.scopes, vec!["kafka", "openid"]);
        assert_eq!(v.validate("user", NOW).unwrap().principal, "bob");
        for bad in ["noexp", "wrongaud", "activestr", "unknown", "down"] {
            assert_eq!(
                v.validate(bad, NOW).unwrap_err().status,
                RefusalStatus::InvalidToken
            );
        }
        assert!(v.validate(&"x".repeat(MAX_TOKEN_LEN + 1), NOW).is_err());
    }

    #[test]
    fn caches_by_digest_and_expires() {
        let client = fake();
        let v = IntrospectionValidator::new(client.clone(), rules(), CacheSettings::default());
        let calls = || client.calls.load(Ordering::Relaxed);
        v.validate("good", NOW).unwrap();
        v.validate("good", NOW + 59_999).unwrap();
        assert_eq!(calls(), 1);
        // The positive TTL (60 s) ends the entry.
        v.validate("good", NOW + 60_000).unwrap();
        assert_eq!(calls(), 2);
        // An entry never outlives exp (5 s here), even inside the TTL.
        v.validate("short", NOW).unwrap();
        v.validate("short", NOW + 4_999).unwrap();
        assert_eq!(calls(), 3);
        assert!(v.validate("short", NOW + 5_000).is_ok()); // fresh call, inside the skew
        assert_eq!(calls(), 4);
        // Refusals are cached for the negative TTL; endpoint failures are not.
        v.validate("unknown", NOW).unwrap_err();
        v.validate("unknown", NOW + 9_999).unwrap_err();
        assert_eq!(calls(), 5);
        v.validate("unknown", NOW + 10_000).unwrap_err();
        assert_eq!(calls(), 6);
        v.validate("down", NOW).unwrap_err();
        v.validate("down", NOW).unwrap_err();
        assert_eq!(calls(), 8);
        // The caches hold digests, never tokens.
        let entries = v.positive.entries.lock().unwrap();
        let digest: Digest32 = Sha256::digest(b"good").into();
        assert!(entries.contains_key(&digest));
    }

    #[test]
    fn caches_are_bounded() {
        let cache: Cache<u32> = Cache::new(3);
        for i in 0..10u8 {
            cache.insert([i; 32], u32::from(i), NOW + 1000 + i64::from(i), NOW);
        }
        assert_eq!(cache.len(), 3);
        // The survivors are the latest to expire.
        assert_eq!(cache.get(&[9; 32], NOW), Some(9));
        assert_eq!(cache.get(&[0; 32], NOW), None);
        // Expired entries make room first.
        let cache: Cache<u32> = Cache::new(2);
        cache.insert([1; 32], 1, NOW + 10, NOW);
        cache.insert([2; 32], 2, NOW + 1000, NOW);
        cache.insert([3; 32], 3, NOW + 500, NOW + 20);
        assert_eq!(cache.get(&[2; 32], NOW + 20), Some(2));
        assert_eq!(cache.get(&[3; 32], NOW + 20), Some(3));
        // Zero capacity caches nothing.
        let none: Cache<u32> = Cache::new(0);
        none.insert([1; 32], 1, NOW + 10, NOW);
        assert_eq!(none.len(), 0);
    }
}
