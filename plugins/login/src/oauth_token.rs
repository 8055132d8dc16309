//! What a token endpoint answers, read the way Kafka's client reads it
//! (`HttpAccessTokenRetriever` + `ClientJwtValidator`): the JSON body's `access_token`, whose
//! JWT payload gives the principal (`sub`, or the configured claim) and the lifetime (`exp`,
//! with `iat` as the start), and the RFC 6749 `error` code of a refusal. The client does not
//! verify the signature — the brokers do — but it refuses a token it could not present or whose
//! lifetime it cannot know. Bytes from the network, parsed sans-I/O here (fuzz target
//! `oauth_token_response`); the host fetches them.

use base64::Engine;
use portcullis::secret::Secret;
use serde_json::Value;

/// The largest token accepted from an endpoint (Portcullis' own listener refuses larger ones).
const MAX_TOKEN_BYTES: usize = 64 * 1024;

/// A token fetched from the endpoint.
#[derive(Clone, Debug)]
pub struct AccessToken {
    /// The token, as presented in `auth=Bearer <token>`.
    pub token: Secret,
    /// Its principal.
    pub principal: String,
    /// When it became valid (`iat`), ms since the epoch, when it says.
    pub issued_at_ms: Option<i64>,
    /// When it expires (`exp`), ms since the epoch.
    pub expiry_ms: i64,
}

/// Why an endpoint's answer cannot be used. Never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenResponseError {
    /// The body is not a JSON object.
    #[error("the token endpoint's answer is not a JSON object")]
    NotJson,
    /// The body has no `access_token` string.
    #[error("the token endpoint's answer has no access_token")]
    NoAccessToken,
    /// The token is larger than Portcullis would accept itself.
    #[error("the access token is over {MAX_TOKEN_BYTES} bytes")]
    TooLarge,
    /// The token is not a JWT of three parts whose payload is a JSON object.
    #[error("the access token is not a JWT: {0}")]
    NotJwt(&'static str),
    /// A claim is missing or has the wrong type.
    #[error("the access token's `{claim}` claim {problem}")]
    Claim {
        /// The claim's name.
        claim: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// Reads a token endpoint's JSON body. `principal_claim` names the claim holding the principal.
pub fn parse_token_response(
    body: &[u8],
    principal_claim: &str,
) -> Result<AccessToken, TokenResponseError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| TokenResponseError::NotJson)?;
    let object = value.as_object().ok_or(TokenResponseError::NotJson)?;
    let token = object
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or(TokenResponseError::NoAccessToken)?;
    parse_access_token(token, principal_claim)
}

/// Reads the claims of a JWT access token without verifying it.
pub fn parse_access_token(
    token: &str,
    principal_claim: &str,
) -> Result<AccessToken, TokenResponseError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenResponseError::TooLarge);
    }
    let mut parts = token.split('.');
    let (Some(_header), Some(payload), Some(_signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenResponseError::NotJwt("it does not have three parts"));
    };
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| TokenResponseError::NotJwt("its payload is not base64url"))?;
    let claims: Value = serde_json::from_slice(&payload)
        .map_err(|_| TokenResponseError::NotJwt("its payload is not JSON"))?;
    let claims = claims.as_object().ok_or(TokenResponseError::NotJwt(
        "its payload is not a JSON object",
    ))?;
    let seconds = |name: &str| -> Result<Option<i64>, TokenResponseError> {
        match claims.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0)
                // Whole milliseconds: JWT times are seconds, possibly fractional.
                .map(|s| Some((s * 1000.0) as i64))
                .ok_or_else(|| TokenResponseError::Claim {
                    claim: name.to_owned(),
                    problem: "is not a non-negative number",
                }),
        }
    };
    let expiry_ms = seconds("exp")?.ok_or_else(|| TokenResponseError::Claim {
        claim: "exp".to_owned(),
        problem: "is missing",
    })?;
    let issued_at_ms = seconds("iat")?;
    let principal = claims
        .get(principal_claim)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| TokenResponseError::Claim {
            claim: principal_claim.to_owned(),
            problem: "is missing or not a non-blank string",
        })?;
    Ok(AccessToken {
        token: Secret::new(token),
        principal: principal.to_owned(),
        issued_at_ms,
        expiry_ms,
    })
}

/// The RFC 6749 `error` code in an error body, if it is a short, printable one (the body is the
/// server's text: only the code is logged).
pub fn error_code(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let code = value.get("error")?.as_str()?;
    (code.len() <= 64 && code.bytes().all(|b| b.is_ascii_graphic())).then(|| code.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.c2ln", b64(r#"{"alg":"RS256"}"#), b64(claims))
    }

    #[test]
    fn reads_principal_and_lifetime() {
        let token = jwt(r#"{"sub":" svc ","exp":1700000100,"iat":1700000000}"#);
        let body =
            format!(r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":100}}"#);
        let parsed = parse_token_response(body.as_bytes(), "sub").unwrap();
        assert_eq!(parsed.principal, "svc");
        assert_eq!(parsed.expiry_ms, 1_700_000_100_000);
        assert_eq!(parsed.issued_at_ms, Some(1_700_000_000_000));
        assert_eq!(parsed.token.expose(), token);
    }

    #[test]
    fn refuses_what_cannot_be_presented() {
        assert_eq!(
            parse_token_response(b"[]", "sub").unwrap_err(),
            TokenResponseError::NotJson
        );
        assert_eq!(
            parse_token_response(br#"{"token_type":"Bearer"}"#, "sub").unwrap_err(),
            TokenResponseError::NoAccessToken
        );
        assert!(matches!(
            parse_access_token("opaque", "sub"),
            Err(TokenResponseError::NotJwt(_))
        ));
        assert!(matches!(
            parse_access_token(&jwt(r#"{"sub":"svc"}"#), "sub"),
            Err(TokenResponseError::Claim { ref claim, .. }) if claim == "exp"
        ));
        assert!(matches!(
            parse_access_token(&jwt(r#"{"exp":5}"#), "sub"),
            Err(TokenResponseError::Claim { ref claim, .. }) if claim == "sub"
        ));
        assert!(matches!(
            parse_access_token(&jwt(r#"{"sub":"a","exp":-1}"#), "sub"),
            Err(TokenResponseError::Claim { .. })
        ));
        let big = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(
            parse_access_token(&big, "sub").unwrap_err(),
            TokenResponseError::TooLarge
        );
    }

    #[test]
    fn an_error_code_is_read_only_when_short_and_printable() {
        assert_eq!(
            error_code(br#"{"error":"invalid_grant","error_description":"x"}"#).as_deref(),
            Some("invalid_grant")
        );
        assert_eq!(error_code(br#"{"error":"two words"}"#), None);
        assert_eq!(error_code(b"not json"), None);
    }

    #[test]
    fn errors_never_carry_the_token() {
        let token = format!("{}.x", jwt(r#"{"sub":"svc","exp":1}"#));
        let error = parse_access_token(&token, "sub").unwrap_err().to_string();
        assert!(!error.contains(&token[..10]), "{error}");
    }
}
