//! The RFC 7628 client initial response and the server's error challenge, parsed and built the
//! way Kafka's `OAuthBearerClientInitialResponse` and `OAuthBearerSaslServer` do.
//!
//! The message is `n,` [`a=` authzid] `,` `%x01` { key `=` value `%x01` } `%x01`. Kafka matches
//! it with one regular expression; this is the same language, scanned by hand: every field is
//! ASCII, the authzid runs to the first `,`, and a value can never hold `%x01`, so each split
//! below is unambiguous and no backtracking is needed.

use std::collections::BTreeMap;

use crate::validator::RefusalStatus;

/// The largest client initial response accepted, in bytes (Kafka's `sasl.server.max.receive.size`
/// default). A longer token is refused by the validators ([`crate::MAX_TOKEN_LEN`]) with the
/// usual challenge; a message longer than this is not parsed at all.
pub const MAX_INITIAL_RESPONSE_LEN: usize = 512 * 1024;

/// The reserved key that carries the credential; every other key is a SASL extension.
pub const AUTH_KEY: &str = "auth";

/// Why a client initial response was refused. The `Display` text is Kafka's `SaslException`
/// message (for the log: the client sees the generic failure, as from Kafka).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FramingError {
    /// The message is longer than [`MAX_INITIAL_RESPONSE_LEN`].
    #[error("Invalid OAUTHBEARER client first message: {0} bytes is over the limit")]
    TooLong(usize),
    /// The message does not match RFC 7628's grammar.
    #[error("Invalid OAUTHBEARER client first message")]
    Malformed,
    /// No `auth` pair.
    #[error("Invalid OAUTHBEARER client first message: 'auth' not specified")]
    AuthMissing,
    /// The `auth` value is not `<scheme> <token>`.
    #[error("Invalid OAUTHBEARER client first message: invalid 'auth' format")]
    AuthFormat,
    /// The scheme is not `Bearer` (any case). Holds the scheme, which is `[A-Za-z0-9_]+`.
    #[error("Invalid scheme in OAUTHBEARER client first message: {0}")]
    Scheme(String),
}

/// A parsed client initial response.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientInitialResponse {
    /// The requested authorization id, as sent (`=2C`/`=3D` not decoded, as in Kafka); empty when
    /// the client sent none.
    pub authorization_id: String,
    /// The bearer token.
    pub token: String,
    /// The SASL extensions: every pair but `auth`. A key sent twice keeps its last value (Kafka's
    /// `Utils.parseMap`).
    pub extensions: BTreeMap<String, String>,
}

impl std::fmt::Debug for ClientInitialResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token: a Debug line may reach a log.
        f.debug_struct("ClientInitialResponse")
            .field("authorization_id", &self.authorization_id)
            .field("token_len", &self.token.len())
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// Parses a client initial response.
pub fn parse_client_initial_response(bytes: &[u8]) -> Result<ClientInitialResponse, FramingError> {
    if bytes.len() > MAX_INITIAL_RESPONSE_LEN {
        return Err(FramingError::TooLong(bytes.len()));
    }
    // Every part of the grammar is ASCII: Kafka's decoding to UTF-16 turns any other byte into a
    // character no part of the pattern accepts.
    let text = std::str::from_utf8(bytes).map_err(|_| FramingError::Malformed)?;
    if !text.is_ascii() {
        return Err(FramingError::Malformed);
    }
    let rest = text.strip_prefix("n,").ok_or(FramingError::Malformed)?;
    let (authorization_id, rest) = match rest.strip_prefix("a=") {
        Some(after) => {
            let (authzid, rest) = after.split_once(',').ok_or(FramingError::Malformed)?;
            if !is_saslname(authzid) {
                return Err(FramingError::Malformed);
            }
            (authzid, rest)
        }
        None => ("", rest.strip_prefix(',').ok_or(FramingError::Malformed)?),
    };
    let pairs = rest
        .strip_prefix('\u{1}')
        .and_then(|r| r.strip_suffix('\u{1}'))
        .ok_or(FramingError::Malformed)?;

    let mut properties = BTreeMap::new();
    if !pairs.is_empty() {
        // Each pair ends with %x01, so the last split piece is empty and every other one is a pair.
        let body = pairs.strip_suffix('\u{1}').ok_or(FramingError::Malformed)?;
        for pair in body.split('\u{1}') {
            let (key, value) = pair.split_once('=').ok_or(FramingError::Malformed)?;
            if !is_key(key) || !is_value(value) {
                return Err(FramingError::Malformed);
            }
            properties.insert(key.to_owned(), value.to_owned());
        }
    }

    // Kafka takes `auth` out of the map and keeps every other pair as an extension, so an
    // extension can never be named `auth` (the client side refuses to send one).
    let auth = properties
        .remove(AUTH_KEY)
        .ok_or(FramingError::AuthMissing)?;
    let token = parse_auth(&auth)?;
    Ok(ClientInitialResponse {
        authorization_id: authorization_id.to_owned(),
        token: token.to_owned(),
        extensions: properties,
    })
}

/// `(?<scheme>\w+) +(?<token>[-_~+/.a-zA-Z0-9]+=*)`, scheme `bearer` in any case.
fn parse_auth(auth: &str) -> Result<&str, FramingError> {
    let (scheme, after) = auth.split_once(' ').ok_or(FramingError::AuthFormat)?;
    let token = after.trim_start_matches(' ');
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(FramingError::AuthFormat);
    }
    let body = token.trim_end_matches('=');
    if body.is_empty() || !body.bytes().all(is_token_byte) {
        return Err(FramingError::AuthFormat);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(FramingError::Scheme(scheme.to_owned()));
    }
    Ok(token)
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~' | b'+' | b'/' | b'.')
}

/// RFC 5801's saslname as Kafka writes it: `([\x01-\x7F] except = and , | =2C | =3D)+`.
fn is_saslname(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'=' => match bytes.get(i + 1..i + 3) {
                Some(b"2C") | Some(b"3D") => i += 3,
                _ => return false,
            },
            b',' | 0 | 0x80..=0xFF => return false,
            _ => i += 1,
        }
    }
    true
}

/// `[A-Za-z]+`.
fn is_key(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic())
}

/// `[\x21-\x7E \t\r\n]+`.
fn is_value(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| matches!(b, 0x21..=0x7E | b' ' | b'\t' | b'\r' | b'\n'))
}

/// The JSON error document of a failed validation (RFC 7628 §3.2.2), exactly as Kafka writes it:
/// `{"status":"…"`, then `, "scope":"…"` and `, "openid-configuration":"…"` when set, then `}`.
/// Like Kafka, values are not escaped: they come from the configuration, never from the client.
pub fn error_challenge(
    status: RefusalStatus,
    scope: Option<&str>,
    openid_configuration: Option<&str>,
) -> Vec<u8> {
    let mut json = format!("{{\"status\":\"{}\"", status.as_str());
    if let Some(scope) = scope {
        json.push_str(", \"scope\":\"");
        json.push_str(scope);
        json.push('"');
    }
    if let Some(url) = openid_configuration {
        json.push_str(", \"openid-configuration\":\"");
        json.push_str(url);
        json.push('"');
    }
    json.push('}');
    json.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ClientInitialResponse, FramingError> {
        parse_client_initial_response(s.as_bytes())
    }

    #[test]
    fn minimal_message() {
        let r = parse("n,,\u{1}auth=Bearer abc.def-ghi\u{1}\u{1}").unwrap();
        assert_eq!(r.authorization_id, "");
        assert_eq!(r.token, "abc.def-ghi");
        assert!(r.extensions.is_empty());
        assert!(!format!("{r:?}").contains("abc.def"));
    }

    #[test]
    fn authzid_extensions_and_scheme_case() {
        let r = parse(
            "n,a=al=2Cice,\u{1}traceId=x y\tz=1\u{1}auth=bEaReR   tok~+/_=\u{1}b=2\u{1}\u{1}",
        )
        .unwrap();
        assert_eq!(r.authorization_id, "al=2Cice");
        assert_eq!(r.token, "tok~+/_=");
        assert_eq!(
            r.extensions.into_iter().collect::<Vec<_>>(),
            vec![
                ("b".to_owned(), "2".to_owned()),
                ("traceId".to_owned(), "x y\tz=1".to_owned())
            ]
        );
    }

    #[test]
    fn last_duplicate_wins_like_kafka() {
        let r = parse("n,,\u{1}auth=Bearer first\u{1}k=1\u{1}auth=Bearer second\u{1}k=2\u{1}\u{1}")
            .unwrap();
        assert_eq!(r.token, "second");
        assert_eq!(r.extensions.get("k").map(String::as_str), Some("2"));
    }

    #[test]
    fn malformed_messages() {
        for m in [
            "",
            "n,",
            "y,,\u{1}auth=Bearer t\u{1}\u{1}",
            "n,,auth=Bearer t\u{1}\u{1}",
            "n,,\u{1}auth=Bearer t\u{1}",
            "n,,\u{1}auth=Bearer t\u{1}\u{1}\u{1}",
            "n,,\u{1}\u{1}\u{1}",
            "n,a=,\u{1}auth=Bearer t\u{1}\u{1}",
            "n,a=x=2c,\u{1}auth=Bearer t\u{1}\u{1}",
            "n,a=x=,\u{1}auth=Bearer t\u{1}\u{1}",
            "n,,\u{1}k1=v\u{1}auth=Bearer t\u{1}\u{1}",
            "n,,\u{1}=v\u{1}auth=Bearer t\u{1}\u{1}",
            "n,,\u{1}k=\u{1}auth=Bearer t\u{1}\u{1}",
            "n,,\u{1}k\u{1}auth=Bearer t\u{1}\u{1}",
            "n,,\u{1}k=\u{7f}\u{1}auth=Bearer t\u{1}\u{1}",
            "n,,\u{1}k=caf\u{e9}\u{1}auth=Bearer t\u{1}\u{1}",
        ] {
            assert_eq!(parse(m), Err(FramingError::Malformed), "{m:?}");
        }
        assert_eq!(
            parse_client_initial_response(b"n,,\x01auth=Bearer t\x01\x01\xff"),
            Err(FramingError::Malformed)
        );
    }

    #[test]
    fn auth_errors() {
        assert_eq!(parse("n,,\u{1}\u{1}"), Err(FramingError::AuthMissing));
        assert_eq!(
            parse("n,,\u{1}Auth=Bearer t\u{1}\u{1}"),
            Err(FramingError::AuthMissing)
        );
        for auth in [
            "Bearer",
            "Bearer ",
            " Bearer t",
            "Bearer\tt",
            "Bearer t t",
            "Bearer =t",
            "Bearer t=t",
            "Bearer t!",
            "Bea-rer t",
        ] {
            let m = format!("n,,\u{1}auth={auth}\u{1}\u{1}");
            assert_eq!(parse(&m), Err(FramingError::AuthFormat), "{auth:?}");
        }
        assert_eq!(
            parse("n,,\u{1}auth=Basic dXNlcg==\u{1}\u{1}"),
            Err(FramingError::Scheme("Basic".to_owned()))
        );
    }

    #[test]
    fn size_bound() {
        let big = format!(
            "n,,\u{1}auth=Bearer {}\u{1}\u{1}",
            "a".repeat(MAX_INITIAL_RESPONSE_LEN)
        );
        assert!(matches!(parse(&big), Err(FramingError::TooLong(_))));
    }

    #[test]
    fn challenges_like_kafka() {
        assert_eq!(
            error_challenge(RefusalStatus::InvalidToken, None, None),
            br#"{"status":"invalid_token"}"#
        );
        assert_eq!(
            error_challenge(
                RefusalStatus::InsufficientScope,
                Some("[a, b]"),
                Some("https://idp/.well-known/openid-configuration")
            ),
            br#"{"status":"insufficient_scope", "scope":"[a, b]", "openid-configuration":"https://idp/.well-known/openid-configuration"}"#
        );
        assert_eq!(
            error_challenge(RefusalStatus::InvalidToken, None, Some("u")),
            br#"{"status":"invalid_token", "openid-configuration":"u"}"#
        );
    }
}
