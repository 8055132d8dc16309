//! The JWKS validator itself.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::Value;

use super::alg::Alg;
use super::keyset::{Key, SharedKeySet};
use super::limiter::{KidLimiter, RefreshLimits};
use super::verify::verify;
use crate::claims::{self, ClaimRules, Source};
use crate::json::truncated;
use crate::jws;
use crate::validator::{Refusal, TokenValidator, ValidatedToken};

/// The most keys a token without `kid` is tried against: each try is a signature check, and a
/// client must not make us run one per key of a large set.
pub const MAX_KEYLESS_CANDIDATES: usize = 4;

/// The host's side: asked to refresh the key set because a token named an unknown `kid`. Must
/// not block (schedule the fetch and return); calls are already rate-limited.
pub trait KeyRefresh: Send + Sync {
    /// A token named `kid`, which the current set lacks.
    fn request_refresh(&self, kid: &str);
}

/// A [`KeyRefresh`] that does nothing, for static key sets.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRefresh;

impl KeyRefresh for NoRefresh {
    fn request_refresh(&self, _kid: &str) {}
}

/// Validates signed JWTs against a [`SharedKeySet`].
pub struct JwksValidator {
    keys: Arc<SharedKeySet>,
    rules: ClaimRules,
    refresh: Arc<dyn KeyRefresh>,
    limiter: KidLimiter,
}

impl JwksValidator {
    /// A validator over `keys`, checking `rules`, asking `refresh` for unknown kids with the
    /// default [`RefreshLimits`].
    pub fn new(keys: Arc<SharedKeySet>, rules: ClaimRules, refresh: Arc<dyn KeyRefresh>) -> Self {
        Self {
            keys,
            rules,
            refresh,
            limiter: KidLimiter::new(RefreshLimits::default()),
        }
    }

    /// The same with other refresh limits.
    pub fn with_refresh_limits(mut self, limits: RefreshLimits) -> Self {
        self.limiter = KidLimiter::new(limits);
        self
    }

    /// The claim rules.
    pub fn rules(&self) -> &ClaimRules {
        &self.rules
    }

    /// The shared key set.
    pub fn keys(&self) -> &Arc<SharedKeySet> {
        &self.keys
    }

    fn verify_signature(&self, compact: &jws::Compact<'_>, now_ms: i64) -> Result<(), Refusal> {
        if compact.signature.is_empty() {
            return Err(Refusal::invalid_token("the token is not signed"));
        }
        let header = jws::decode_header(compact.header)?;
        let alg = match header.get("alg") {
            Some(Value::String(name)) => match Alg::from_name(name) {
                Some(alg) => alg,
                None if name.eq_ignore_ascii_case("none") => {
                    return Err(Refusal::invalid_token("alg none is never accepted"));
                }
                None if name.starts_with("HS") => {
                    return Err(Refusal::invalid_token(format!(
                        "HMAC algorithm {name} is never accepted"
                    )));
                }
                None => {
                    return Err(Refusal::invalid_token(format!(
                        "algorithm {:?} is not accepted",
                        truncated(name)
                    )));
                }
            },
            _ => return Err(Refusal::invalid_token("the header has no alg")),
        };
        // RFC 7515 §4.1.11: an extension we do not understand must not be ignored.
        if header.contains_key("crit") {
            return Err(Refusal::invalid_token("the header has crit extensions"));
        }
        let kid = match header.get("kid") {
            None => None,
            Some(Value::String(kid)) => Some(kid.as_str()),
            Some(_) => return Err(Refusal::invalid_token("the header's kid is not a string")),
        };

        let set = self.keys.guard();
        let candidates: Vec<&Key> = match kid {
            Some(kid) => {
                if !set.has_kid(kid) {
                    if self.limiter.allow(kid, now_ms) {
                        self.refresh.request_refresh(kid);
                    }
                    return Err(Refusal::invalid_token(format!(
                        "no key with kid {:?} (refresh requested unless rate-limited)",
                        truncated(kid)
                    )));
                }
                let fitting: Vec<&Key> = set
                    .keys()
                    .iter()
                    .filter(|k| k.kid.as_deref() == Some(kid) && k.fits(alg))
                    .collect();
                if fitting.is_empty() {
                    return Err(Refusal::invalid_token(format!(
                        "the key {:?} does not fit alg {}",
                        truncated(kid),
                        alg.name()
                    )));
                }
                fitting
            }
            None => {
                let fitting: Vec<&Key> = set
                    .keys()
                    .iter()
                    .filter(|k| k.fits(alg))
                    .take(MAX_KEYLESS_CANDIDATES)
                    .collect();
                if fitting.is_empty() {
                    return Err(Refusal::invalid_token(format!(
                        "the token has no kid and no key fits alg {}",
                        alg.name()
                    )));
                }
                fitting
            }
        };
        let signature = decode_signature(compact.signature)?;
        let message = compact.signing_input.as_bytes();
        let verified = candidates
            .iter()
            .any(|key| verify(alg, &key.material, message, &signature));
        if verified {
            Ok(())
        } else {
            Err(Refusal::invalid_token(format!(
                "the {} signature does not verify",
                alg.name()
            )))
        }
    }
}

/// The largest signature: RSA-8192's 1024 bytes.
const MAX_SIGNATURE_LEN: usize = 1024;

fn decode_signature(part: &str) -> Result<Vec<u8>, Refusal> {
    // base64url grows 3 bytes to 4 characters.
    if part.len() > MAX_SIGNATURE_LEN.div_ceil(3) * 4 {
        return Err(Refusal::invalid_token("the signature is too long"));
    }
    jws::BASE64URL
        .decode(part)
        .map_err(|_| Refusal::invalid_token("the signature is not base64url"))
}

impl std::fmt::Debug for JwksValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksValidator")
            .field("rules", &self.rules)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl TokenValidator for JwksValidator {
    fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal> {
        let compact = jws::split(token)?;
        // The signature first: the claims of an unverified token are not even parsed.
        self.verify_signature(&compact, now_ms)?;
        let claims = jws::decode_claims(compact.payload)?;
        claims::check(&self.rules, &claims, now_ms, Source::Jwt)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use base64::Engine as _;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::{json, Value};

    use super::*;
    use crate::jwks::KeySet;
    use crate::jws::BASE64URL;
    use crate::test_keys::{self, key_set, raw_token, TestKey};
    use crate::validator::RefusalStatus;

    const NOW: i64 = 1_700_000_000_000;
    const ISSUER: &str = "https://idp.example/realms/kafka";

    #[derive(Default)]
    struct Recorder {
        kids: Mutex<Vec<String>>,
    }

    impl KeyRefresh for Recorder {
        fn request_refresh(&self, kid: &str) {
            self.kids.lock().unwrap().push(kid.to_owned());
        }
    }

    impl Recorder {
        fn requested(&self) -> Vec<String> {
            self.kids.lock().unwrap().clone()
        }
    }

    fn rules() -> ClaimRules {
        ClaimRules {
            expected_audience: vec!["kafka".into()],
            expected_issuer: Some(ISSUER.into()),
            groups_claim_name: Some("groups".into()),
            ..ClaimRules::default()
        }
    }

    fn claims() -> Value {
        json!({
            "sub": "alice", "iss": ISSUER, "aud": ["account", "kafka"],
            "exp": NOW / 1000 + 300, "iat": NOW / 1000 - 10,
            "scope": "openid kafka", "groups": ["readers"], "jti": "token-1",
        })
    }

    fn claims_with(extra: Value) -> Value {
        let mut c = claims();
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c
    }

    struct Fixture {
        validator: JwksValidator,
        refresh: Arc<Recorder>,
        keys: Arc<SharedKeySet>,
    }

    fn fixture(jwks: &[Value]) -> Fixture {
        let keys = Arc::new(SharedKeySet::new(
            KeySet::from_json(&key_set(jwks)).unwrap(),
        ));
        let refresh = Arc::new(Recorder::default());
        let validator = JwksValidator::new(Arc::clone(&keys), rules(), refresh.clone());
        Fixture {
            validator,
            refresh,
            keys,
        }
    }

    fn refused(f: &Fixture, token: &str) -> Refusal {
        let r = f.validator.validate(token, NOW).unwrap_err();
        assert_eq!(r.status, RefusalStatus::InvalidToken);
        r
    }

    #[test]
    fn every_algorithm_verifies() {
        let rsa = test_keys::rsa();
        let (p256, p384, ed) = (test_keys::p256(), test_keys::p384(), test_keys::ed25519());
        let f = fixture(&[
            rsa.jwk(Some("rsa")),
            p256.jwk(Some("p256")),
            p384.jwk(Some("p384")),
            ed.jwk(Some("ed")),
        ]);
        let cases: [(&TestKey, &str, Algorithm); 9] = [
            (rsa, "rsa", Algorithm::RS256),
            (rsa, "rsa", Algorithm::RS384),
            (rsa, "rsa", Algorithm::RS512),
            (rsa, "rsa", Algorithm::PS256),
            (rsa, "rsa", Algorithm::PS384),
            (rsa, "rsa", Algorithm::PS512),
            (&p256, "p256", Algorithm::ES256),
            (&p384, "p384", Algorithm::ES384),
            (&ed, "ed", Algorithm::EdDSA),
        ];
        for (key, kid, alg) in cases {
            let token = key.sign(alg, Some(kid), &claims());
            let t = f
                .validator
                .validate(&token, NOW)
                .unwrap_or_else(|r| panic!("{alg:?}: {r}"));
            assert_eq!(t.principal, "alice");
            assert_eq!(t.expiry_ms, (NOW / 1000 + 300) * 1000);
            assert_eq!(t.issued_at_ms, Some((NOW / 1000 - 10) * 1000));
            assert_eq!(t.scopes, vec!["openid", "kafka"]);
            assert_eq!(t.groups, vec!["readers"]);
            assert_eq!(t.jti.as_deref(), Some("token-1"));
            // Without kid: the keys whose type fits the alg are tried.
            let keyless = key.sign(alg, None, &claims());
            assert!(
                f.validator.validate(&keyless, NOW).is_ok(),
                "{alg:?} without kid"
            );
        }
        assert!(f.refresh.requested().is_empty());
        assert!(f.validator.is_cheap());
    }

    #[test]
    fn claim_refusals() {
        let rsa = test_keys::rsa();
        let f = fixture(&[rsa.jwk(Some("k"))]);
        let sign = |extra: Value| rsa.sign(Algorithm::RS256, Some("k"), &claims_with(extra));
        let expired = refused(&f, &sign(json!({"exp": NOW / 1000 - 31})));
        assert!(expired.reason.contains("expired"), "{expired}");
        let future = refused(&f, &sign(json!({"nbf": NOW / 1000 + 31})));
        assert!(future.reason.contains("not valid before"), "{future}");
        refused(&f, &sign(json!({"iat": NOW / 1000 + 31})));
        refused(&f, &sign(json!({"iat": null})));
        refused(&f, &sign(json!({"exp": null})));
        refused(&f, &sign(json!({"aud": "other"})));
        refused(&f, &sign(json!({"aud": null})));
        refused(
            &f,
            &sign(json!({"iss": "https://evil.example/realms/kafka"})),
        );
        refused(&f, &sign(json!({"iss": null})));
        let no_sub = refused(&f, &sign(json!({"sub": null})));
        assert!(no_sub.reason.contains("sub"), "{no_sub}");
        refused(&f, &sign(json!({"sub": "   "})));
        refused(&f, &sign(json!({"groups": {"a": 1}})));
        // Within the skew, fine.
        assert!(f
            .validator
            .validate(&sign(json!({"exp": NOW / 1000 - 29})), NOW)
            .is_ok());
    }

    #[test]
    fn required_scope_is_insufficient_scope() {
        let rsa = test_keys::rsa();
        let keys = Arc::new(SharedKeySet::new(
            KeySet::from_json(&key_set(&[rsa.jwk(Some("k"))])).unwrap(),
        ));
        let validator = JwksValidator::new(
            keys,
            ClaimRules {
                required_scopes: vec!["kafka".into(), "admin".into()],
                ..rules()
            },
            Arc::new(NoRefresh),
        );
        let r = validator
            .validate(&rsa.sign(Algorithm::RS256, Some("k"), &claims()), NOW)
            .unwrap_err();
        assert_eq!(r.status, RefusalStatus::InsufficientScope);
        assert_eq!(r.scope.as_deref(), Some("kafka admin"));
    }

    #[test]
    fn unsigned_and_hmac_tokens_never_verify() {
        let rsa = test_keys::rsa();
        let p256 = test_keys::p256();
        // The set also publishes the RSA key's bytes as an oct key: it must be skipped.
        let oct = json!({"kty": "oct", "kid": "hmac", "k": BASE64URL.encode(&rsa.public_bytes)});
        let f = fixture(&[rsa.jwk(Some("k")), p256.jwk(Some("ec")), oct]);
        assert_eq!(f.keys.load().len(), 2);

        let none = refused(&f, &raw_token(&json!({"alg": "none"}), &claims(), ""));
        assert!(none.reason.contains("not signed"), "{none}");
        let none = refused(
            &f,
            &raw_token(&json!({"alg": "none", "kid": "k"}), &claims(), "c2ln"),
        );
        assert!(none.reason.contains("none"), "{none}");
        refused(&f, &raw_token(&json!({"alg": "None"}), &claims(), "c2ln"));
        refused(&f, &raw_token(&json!({"kid": "k"}), &claims(), "c2ln"));

        // Algorithm confusion: HS256 keyed with the public key's bytes.
        for (public, kid) in [
            (&rsa.public_bytes, "k"),
            (&p256.public_bytes, "ec"),
            (&rsa.public_bytes, "hmac"),
        ] {
            let forger = EncodingKey::from_secret(public).unwrap();
            for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
                let mut header = Header::new(alg);
                header.kid = Some(kid.to_owned());
                let token = jsonwebtoken::encode(&header, &claims(), &forger).unwrap();
                let r = refused(&f, &token);
                assert!(r.reason.contains("HMAC"), "{r}");
                let mut header = Header::new(alg);
                header.kid = None;
                refused(
                    &f,
                    &jsonwebtoken::encode(&header, &claims(), &forger).unwrap(),
                );
            }
        }
        // "hmac" was never loaded, and an HS token never gets as far as asking for it.
        assert!(f.refresh.requested().is_empty());
    }

    #[test]
    fn signature_refusals() {
        let rsa = test_keys::rsa();
        let other = test_keys::rsa_other();
        let p256 = test_keys::p256();
        let f = fixture(&[rsa.jwk(Some("k")), p256.jwk(Some("ec"))]);
        // Signed by another key under our kid.
        let r = refused(&f, &other.sign(Algorithm::RS256, Some("k"), &claims()));
        assert!(r.reason.contains("does not verify"), "{r}");
        // Without kid, signed by a key we do not have.
        refused(&f, &other.sign(Algorithm::PS256, None, &claims()));
        // A flipped signature bit.
        let good = rsa.sign(Algorithm::RS256, Some("k"), &claims());
        let (input, sig) = good.rsplit_once('.').unwrap();
        let mut raw = BASE64URL.decode(sig).unwrap();
        raw[10] ^= 1;
        refused(&f, &format!("{input}.{}", BASE64URL.encode(&raw)));
        refused(&f, &format!("{input}."));
        refused(&f, &format!("{input}.!!!"));
        // A tampered payload under a genuine signature.
        let parts: Vec<&str> = good.split('.').collect();
        let forged = BASE64URL.encode(claims_with(json!({"sub": "admin"})).to_string());
        refused(&f, &format!("{}.{forged}.{}", parts[0], parts[2]));
        // A tampered header (alg swapped to PS256) under the RS256 signature.
        let header =
            BASE64URL.encode(json!({"alg": "PS256", "kid": "k", "typ": "JWT"}).to_string());
        refused(&f, &format!("{header}.{}.{}", parts[1], parts[2]));
        // The key must fit the alg: an ES256 token naming the RSA key, an RS256 one naming the EC key.
        let r = refused(&f, &p256.sign(Algorithm::ES256, Some("k"), &claims()));
        assert!(r.reason.contains("does not fit"), "{r}");
        refused(&f, &rsa.sign(Algorithm::RS256, Some("ec"), &claims()));
        // An embedded jwk header is never trusted.
        let attacker = test_keys::p256();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("ec".to_owned());
        header.jwk = serde_json::from_value(attacker.jwk(None)).ok();
        refused(
            &f,
            &jsonwebtoken::encode(&header, &claims(), &attacker.encoding).unwrap(),
        );
        // A critical header extension.
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("k".to_owned());
        header.crit = Some(vec!["exp".to_owned()]);
        refused(
            &f,
            &jsonwebtoken::encode(&header, &claims(), &rsa.encoding).unwrap(),
        );
        assert!(f.refresh.requested().is_empty());
    }

    #[test]
    fn key_alg_must_match() {
        let rsa = test_keys::rsa();
        let mut jwk = rsa.jwk(Some("k"));
        jwk["alg"] = json!("RS256");
        let f = fixture(&[jwk]);
        assert!(f
            .validator
            .validate(&rsa.sign(Algorithm::RS256, Some("k"), &claims()), NOW)
            .is_ok());
        refused(&f, &rsa.sign(Algorithm::PS256, Some("k"), &claims()));
        refused(&f, &rsa.sign(Algorithm::RS512, None, &claims()));
    }

    #[test]
    fn not_jwts_and_oversize() {
        let rsa = test_keys::rsa();
        let f = fixture(&[rsa.jwk(Some("k"))]);
        for bad in [
            "",
            "opaque-token",
            "a.b",
            "a.b.c.d.e",
            "!!!.e30.c2ln",
            "e30.!!!.c2ln",
            "bm90IGpzb24.e30.c2ln",
        ] {
            refused(&f, bad);
        }
        let good = rsa.sign(Algorithm::RS256, Some("k"), &claims());
        let parts: Vec<&str> = good.split('.').collect();
        let big = BASE64URL.encode(claims_with(json!({"pad": "x".repeat(MAX_TOKEN)})).to_string());
        let r = refused(&f, &format!("{}.{big}.{}", parts[0], parts[2]));
        assert!(r.reason.contains("limit"), "{r}");
        // Deeply nested claims are refused before any recursion can hurt.
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(5000), "]".repeat(5000));
        refused(
            &f,
            &format!("{}.{}.{}", parts[0], BASE64URL.encode(deep), parts[2]),
        );
    }

    const MAX_TOKEN: usize = crate::MAX_TOKEN_LEN;

    #[test]
    fn unknown_kid_requests_one_refresh_then_succeeds() {
        let old = test_keys::rsa();
        let new = test_keys::p256();
        let f = fixture(&[old.jwk(Some("old"))]);
        let token = new.sign(Algorithm::ES256, Some("new"), &claims());
        let r = refused(&f, &token);
        assert!(r.reason.contains("no key with kid"), "{r}");
        assert_eq!(f.refresh.requested(), vec!["new"]);
        // The same kid again within 60 s: refused, no new request.
        refused(&f, &token);
        assert!(f.validator.validate(&token, NOW + 59_999).is_err());
        assert_eq!(f.refresh.requested(), vec!["new"]);
        // The host refreshes; the next login succeeds.
        f.keys.store(
            KeySet::from_json(&key_set(&[old.jwk(Some("old")), new.jwk(Some("new"))])).unwrap(),
        );
        assert_eq!(
            f.validator.validate(&token, NOW).unwrap().principal,
            "alice"
        );
        // A flood of random kids: one request per 10 s at most, never for kids over 1000 chars.
        for i in 0..1000 {
            let t = new.sign(Algorithm::ES256, Some(&format!("random-{i}")), &claims());
            assert!(f.validator.validate(&t, NOW + 60_000 + i).is_err());
        }
        assert_eq!(f.refresh.requested().len(), 2);
        let long = new.sign(Algorithm::ES256, Some(&"k".repeat(1001)), &claims());
        assert!(f.validator.validate(&long, NOW + 120_000).is_err());
        assert_eq!(f.refresh.requested().len(), 2);
    }

    #[test]
    fn kafka_like_limits_are_configurable() {
        let rsa = test_keys::rsa();
        let f = fixture(&[rsa.jwk(Some("k"))]);
        let validator = JwksValidator::new(Arc::clone(&f.keys), rules(), f.refresh.clone())
            .with_refresh_limits(RefreshLimits {
                global_ms: 0,
                ..RefreshLimits::default()
            });
        for i in 0..20 {
            let t = rsa.sign(Algorithm::RS256, Some(&format!("kid-{i}")), &claims());
            assert!(validator.validate(&t, NOW).is_err());
        }
        assert_eq!(f.refresh.requested().len(), 20);
    }

    #[test]
    fn keyless_tokens_try_a_bounded_number_of_keys() {
        let keys: Vec<TestKey> = (0..MAX_KEYLESS_CANDIDATES + 1)
            .map(|_| test_keys::ed25519())
            .collect();
        let jwks: Vec<Value> = keys.iter().map(|k| k.jwk(None)).collect();
        let f = fixture(&jwks);
        assert!(f
            .validator
            .validate(&keys[0].sign(Algorithm::EdDSA, None, &claims()), NOW)
            .is_ok());
        // The last key is past the bound: its token is refused rather than costing one more check.
        assert!(f
            .validator
            .validate(
                &keys[MAX_KEYLESS_CANDIDATES].sign(Algorithm::EdDSA, None, &claims()),
                NOW
            )
            .is_err());
    }
}
