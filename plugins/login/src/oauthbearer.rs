//! The client half of SASL/OAUTHBEARER (RFC 7628, as Kafka's `OAuthBearerSaslClient` speaks it):
//! one initial response carrying the bearer token; the server answers with an empty token on
//! success, or with a JSON error document that the client acknowledges with a single `0x01`
//! before the server fails the exchange.
//!
//! Fetching the token is the login module's business (a token endpoint is I/O, done by the
//! host); this exchange only frames the token it is given.

use std::collections::BTreeMap;

use portcullis::login::{LoginError, SaslClientExchange};
use portcullis::secret::Secret;

/// The mechanism name.
pub const MECHANISM_NAME: &str = "OAUTHBEARER";

/// RFC 7628's separator between the key/value pairs (and the client's acknowledgement of an
/// error challenge).
const SEPARATOR: u8 = 0x01;

/// The client half of one OAUTHBEARER exchange.
pub struct OAuthBearerClientExchange {
    token: Secret,
    extensions: BTreeMap<String, String>,
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Start,
    /// The initial response is sent; an empty answer completes the exchange.
    Sent,
    /// The server sent an error document; the client answered `0x01` and the server will fail
    /// the exchange. Kept to say why.
    Refused(String),
    Complete,
    Failed,
}

impl OAuthBearerClientExchange {
    /// An exchange presenting `token`.
    pub fn new(token: Secret) -> Self {
        Self {
            token,
            extensions: BTreeMap::new(),
            state: State::Start,
        }
    }

    /// Adds SASL extensions (KIP-342) to the initial response. Keys must be letters only and may
    /// not be `auth`; values printable ASCII: checked when the response is built.
    pub fn with_extensions(mut self, extensions: BTreeMap<String, String>) -> Self {
        self.extensions = extensions;
        self
    }

    /// What the server said when it refused the token, if it did.
    pub fn refusal(&self) -> Option<&str> {
        match &self.state {
            State::Refused(reason) => Some(reason),
            _ => None,
        }
    }
}

impl std::fmt::Debug for OAuthBearerClientExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBearerClientExchange")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Whether `token` uses only the characters RFC 6750's `b64token` allows (what Kafka's server
/// accepts): letters, digits, `-._~+/`, then any number of `=`.
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

fn extension_is_valid(key: &str, value: &str) -> bool {
    !key.is_empty()
        && key != "auth"
        && key.bytes().all(|b| b.is_ascii_alphabetic())
        && !value.is_empty()
        && value
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) || b" \t\r\n".contains(&b))
}

impl SaslClientExchange for OAuthBearerClientExchange {
    fn initial(&mut self) -> Result<Vec<u8>, LoginError> {
        if self.state != State::Start {
            return Err(LoginError(
                "OAUTHBEARER exchange already started".to_owned(),
            ));
        }
        let token = self.token.expose();
        if !is_b64token(token) {
            self.state = State::Failed;
            // Never the token itself: only what is wrong with it.
            return Err(LoginError(
                "the OAuth access token holds characters a bearer token may not (RFC 6750 b64token)"
                    .to_owned(),
            ));
        }
        if let Some((key, _)) = self
            .extensions
            .iter()
            .find(|(k, v)| !extension_is_valid(k, v))
        {
            self.state = State::Failed;
            return Err(LoginError(format!(
                "invalid OAUTHBEARER extension {key:?}: keys are letters other than `auth`, \
                 values printable ASCII"
            )));
        }
        let mut message = Vec::with_capacity(token.len() + 32);
        message.extend_from_slice(b"n,,");
        message.push(SEPARATOR);
        message.extend_from_slice(b"auth=Bearer ");
        message.extend_from_slice(token.as_bytes());
        message.push(SEPARATOR);
        for (key, value) in &self.extensions {
            message.extend_from_slice(key.as_bytes());
            message.push(b'=');
            message.extend_from_slice(value.as_bytes());
            message.push(SEPARATOR);
        }
        message.push(SEPARATOR);
        self.state = State::Sent;
        Ok(message)
    }

    fn step(&mut self, server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError> {
        match &self.state {
            State::Sent if server_token.is_empty() => {
                self.state = State::Complete;
                Ok(None)
            }
            State::Sent => {
                // The error document (`{"status":"invalid_token",...}`): acknowledge it as RFC 7628
                // §3.2.3 asks, so the server can end the exchange with its failure.
                let reason = String::from_utf8_lossy(server_token).into_owned();
                self.state = State::Refused(reason);
                Ok(Some(vec![SEPARATOR]))
            }
            State::Refused(reason) => {
                let reason = reason.clone();
                self.state = State::Failed;
                Err(LoginError(format!(
                    "the server refused the OAuth token: {reason}"
                )))
            }
            State::Start => Err(LoginError(
                "OAUTHBEARER exchange stepped before the initial response".to_owned(),
            )),
            State::Complete | State::Failed => Err(LoginError(
                "OAUTHBEARER exchange already finished".to_owned(),
            )),
        }
    }

    fn is_complete(&self) -> bool {
        self.state == State::Complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_response_is_kafkas_framing() {
        let mut exchange = OAuthBearerClientExchange::new(Secret::new("abc.def-_~+/.ghi=="));
        let initial = exchange.initial().unwrap();
        assert_eq!(initial, b"n,,\x01auth=Bearer abc.def-_~+/.ghi==\x01\x01");
        assert_eq!(exchange.step(b"").unwrap(), None);
        assert!(exchange.is_complete());
    }

    #[test]
    fn extensions_follow_the_token() {
        let extensions = BTreeMap::from([("traceId".to_owned(), "123".to_owned())]);
        let mut exchange =
            OAuthBearerClientExchange::new(Secret::new("t")).with_extensions(extensions);
        assert_eq!(
            exchange.initial().unwrap(),
            b"n,,\x01auth=Bearer t\x01traceId=123\x01\x01"
        );
    }

    #[test]
    fn an_error_challenge_is_acknowledged_then_reported() {
        let mut exchange = OAuthBearerClientExchange::new(Secret::new("t"));
        exchange.initial().unwrap();
        let ack = exchange.step(br#"{"status":"invalid_token"}"#).unwrap();
        assert_eq!(ack, Some(vec![0x01]));
        assert_eq!(exchange.refusal(), Some(r#"{"status":"invalid_token"}"#));
        let error = exchange.step(b"").unwrap_err();
        assert!(error.0.contains("invalid_token"), "{error}");
        assert!(!exchange.is_complete());
    }

    #[test]
    fn a_token_outside_b64token_or_a_bad_extension_is_refused_without_echoing_the_token() {
        let mut exchange = OAuthBearerClientExchange::new(Secret::new("secret with space"));
        let error = exchange.initial().unwrap_err();
        assert!(!error.0.contains("secret"), "{error}");
        for (key, value) in [("auth", "x"), ("a1", "x"), ("k", "")] {
            let extensions = BTreeMap::from([(key.to_owned(), value.to_owned())]);
            let mut exchange =
                OAuthBearerClientExchange::new(Secret::new("t")).with_extensions(extensions);
            assert!(exchange.initial().is_err(), "{key}={value}");
        }
    }

    #[test]
    fn stepping_out_of_order_fails() {
        let mut exchange = OAuthBearerClientExchange::new(Secret::new("t"));
        assert!(exchange.step(b"").is_err());
        exchange.initial().unwrap();
        assert!(exchange.initial().is_err());
    }
}
