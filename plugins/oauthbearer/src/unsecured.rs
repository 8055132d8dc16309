//! Kafka's development validator (`OAuthBearerUnsecuredValidatorCallbackHandler`): tokens with
//! `alg: none` and no signature, checked for times, principal and scope only. Anyone can mint
//! such a token; the host refuses this validator unless `allow_unsecured = true`.

use serde_json::{Map, Value};

use crate::jws;
use crate::validator::{Refusal, TokenValidator, ValidatedToken};

/// The unsecured validator's options (Kafka's `unsecuredValidator*` JAAS options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsecuredRules {
    /// The claim holding the principal (`sub`).
    pub principal_claim_name: String,
    /// The claim holding the scope (`scope`).
    pub scope_claim_name: String,
    /// Scopes the token must all carry (none).
    pub required_scopes: Vec<String>,
    /// Allowed clock skew in ms (0; a negative value counts as 0).
    pub clock_skew_ms: i64,
}

impl Default for UnsecuredRules {
    fn default() -> Self {
        Self {
            principal_claim_name: "sub".to_owned(),
            scope_claim_name: "scope".to_owned(),
            required_scopes: Vec::new(),
            clock_skew_ms: 0,
        }
    }
}

/// Validates unsigned (`alg: none`) tokens, exactly as Kafka's default handler does.
#[derive(Clone, Debug, Default)]
pub struct UnsecuredValidator {
    rules: UnsecuredRules,
}

impl UnsecuredValidator {
    /// A validator with these options.
    pub fn new(rules: UnsecuredRules) -> Self {
        Self { rules }
    }
}

impl TokenValidator for UnsecuredValidator {
    fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal> {
        let rules = &self.rules;
        let skew = rules.clock_skew_ms.max(0);
        let compact = jws::split(token)?;
        if !compact.signature.is_empty() {
            return Err(Refusal::invalid_token(
                "an unsecured token must not carry a signature",
            ));
        }
        let header = jws::decode_header(compact.header)?;
        if header.get("alg").and_then(Value::as_str) != Some("none") {
            return Err(Refusal::invalid_token(
                "an unsecured token must have alg none",
            ));
        }
        let claims = jws::decode_claims(compact.payload)?;

        let principal = match claims.get(&rules.principal_claim_name) {
            // Kafka checks it is not blank but keeps it untrimmed.
            Some(Value::String(p)) if !p.trim().is_empty() => p.clone(),
            _ => {
                return Err(Refusal::invalid_token(format!(
                    "the {} claim is missing, blank or not a string",
                    rules.principal_claim_name
                )))
            }
        };
        let issued_at_ms = unsecured_time(&claims, "iat")?;
        if let Some(iat) = issued_at_ms {
            if now_ms.saturating_add(skew) < iat {
                return Err(Refusal::invalid_token(format!(
                    "issued at {iat} ms, after now ({now_ms} ms) plus the skew ({skew} ms)"
                )));
            }
        }
        let expiry_ms = unsecured_time(&claims, "exp")?
            .ok_or_else(|| Refusal::invalid_token("the token has no exp claim"))?;
        if now_ms.saturating_sub(skew) >= expiry_ms {
            return Err(Refusal::invalid_token(format!(
                "the token expired at {expiry_ms} ms (now {now_ms} ms, skew {skew} ms)"
            )));
        }
        if let Some(iat) = issued_at_ms {
            if expiry_ms <= iat {
                return Err(Refusal::invalid_token(
                    "the token expires before it was issued",
                ));
            }
        }

        let scopes = scope(claims.get(&rules.scope_claim_name));
        if let Some(missing) = rules.required_scopes.iter().find(|s| !scopes.contains(s)) {
            // Kafka puts Java's List.toString of the required scopes in the challenge.
            return Err(Refusal::insufficient_scope(
                format!("the token's scope lacks the required {missing:?}"),
                format!("[{}]", rules.required_scopes.join(", ")),
            ));
        }
        let jti = claims.get("jti").and_then(Value::as_str).map(str::to_owned);
        Ok(ValidatedToken {
            principal,
            expiry_ms,
            issued_at_ms,
            scopes,
            groups: Vec::new(),
            jti,
        })
    }
}

/// Kafka reads unsecured times as any JSON number of seconds, rounded to the ms
/// (`Math.round(seconds * 1000)`); anything else is refused.
fn unsecured_time(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, Refusal> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(s) => s
                .checked_mul(1000)
                .map(Some)
                .ok_or_else(|| Refusal::invalid_token(format!("the {name} claim is out of range"))),
            None => match n.as_f64() {
                Some(f) if f.is_finite() && f.abs() < 9.0e15 => {
                    Ok(Some((f * 1000.0).round() as i64))
                }
                _ => Err(Refusal::invalid_token(format!(
                    "the {name} claim is out of range"
                ))),
            },
        },
        Some(_) => Err(Refusal::invalid_token(format!(
            "the {name} claim is not a number"
        ))),
    }
}

/// Kafka's `calculateScope`: a string is one scope (trimmed; blank gives none), a list gives its
/// non-blank entries trimmed (numbers and booleans as their text), duplicates dropped.
fn scope(value: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: &str| {
        let s = s.trim();
        if !s.is_empty() && !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    };
    match value {
        Some(Value::String(s)) => add(s),
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(s) => add(s),
                    Value::Number(n) => add(&n.to_string()),
                    Value::Bool(b) => add(if *b { "true" } else { "false" }),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use serde_json::json;

    use super::*;
    use crate::jws::BASE64URL;
    use crate::validator::RefusalStatus;

    const NOW: i64 = 1_700_000_000_000;

    fn token(header: Value, claims: Value, signature: &str) -> String {
        format!(
            "{}.{}.{signature}",
            BASE64URL.encode(header.to_string()),
            BASE64URL.encode(claims.to_string())
        )
    }

    fn none(claims: Value) -> String {
        token(json!({"alg": "none"}), claims, "")
    }

    #[test]
    fn accepts_kafka_unsecured_tokens() {
        let v = UnsecuredValidator::default();
        let t = v
            .validate(&none(json!({"sub": "alice", "exp": NOW / 1000 + 60, "iat": NOW / 1000, "scope": "a b"})), NOW)
            .unwrap();
        assert_eq!(t.principal, "alice");
        assert_eq!(t.expiry_ms, NOW + 60_000);
        // Kafka does not split the string.
        assert_eq!(t.scopes, vec!["a b"]);
        let t = v
            .validate(&none(json!({"sub": "bob", "exp": (NOW as f64) / 1000.0 + 1.2345, "scope": [" x", "", 5]})), NOW)
            .unwrap();
        assert_eq!(t.expiry_ms, NOW + 1235);
        assert_eq!(t.issued_at_ms, None);
        assert_eq!(t.scopes, vec!["x", "5"]);
    }

    #[test]
    fn refusals() {
        let v = UnsecuredValidator::default();
        let exp = NOW / 1000 + 60;
        for bad in [
            token(json!({"alg": "RS256"}), json!({"sub": "a", "exp": exp}), ""),
            token(
                json!({"alg": "none"}),
                json!({"sub": "a", "exp": exp}),
                "c2ln",
            ),
            token(json!({}), json!({"sub": "a", "exp": exp}), ""),
            none(json!({"sub": "a"})),
            none(json!({"sub": "  ", "exp": exp})),
            none(json!({"sub": 1, "exp": exp})),
            none(json!({"exp": exp})),
            none(json!({"sub": "a", "exp": NOW / 1000})),
            none(json!({"sub": "a", "exp": "soon"})),
            none(json!({"sub": "a", "exp": exp, "iat": NOW / 1000 + 1})),
            none(json!({"sub": "a", "exp": exp, "iat": exp})),
            "not a jwt".to_owned(),
            "a..".to_owned(),
        ] {
            let r = v.validate(&bad, NOW).unwrap_err();
            assert_eq!(r.status, RefusalStatus::InvalidToken, "{bad}");
        }
        // The skew lets a just-expired token and a slightly future iat through.
        let skewed = UnsecuredValidator::new(UnsecuredRules {
            clock_skew_ms: 5_000,
            ..UnsecuredRules::default()
        });
        assert!(skewed
            .validate(
                &none(json!({"sub": "a", "exp": NOW / 1000 - 4, "iat": NOW / 1000 - 10})),
                NOW
            )
            .is_ok());
        assert!(skewed
            .validate(
                &none(json!({"sub": "a", "exp": exp, "iat": NOW / 1000 + 5})),
                NOW
            )
            .is_ok());
    }

    #[test]
    fn required_scope_gives_insufficient_scope() {
        let v = UnsecuredValidator::new(UnsecuredRules {
            required_scopes: vec!["read".into(), "write".into()],
            ..UnsecuredRules::default()
        });
        let exp = NOW / 1000 + 60;
        assert!(v
            .validate(
                &none(json!({"sub": "a", "exp": exp, "scope": ["write", "read"]})),
                NOW
            )
            .is_ok());
        let r = v
            .validate(&none(json!({"sub": "a", "exp": exp, "scope": "read"})), NOW)
            .unwrap_err();
        assert_eq!(r.status, RefusalStatus::InsufficientScope);
        assert_eq!(r.scope.as_deref(), Some("[read, write]"));
    }
}
