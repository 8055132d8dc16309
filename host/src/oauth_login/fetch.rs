//! Asking the token endpoint for a token, with Kafka's retry rules (`HttpAccessTokenRetriever`
//! and `Retry`): failed attempt n waits `backoff × 2^(n−1)`, within `backoff_max` in all (see
//! [`RetryPolicy`]); an answer that says the request itself is wrong (400, 401, 403, …) is not
//! retried. Blocking: the login module runs on threads that may block.

use std::time::Instant;

use portcullis::secret::Secret;

use super::token::{error_code, parse_token_response, AccessToken, TokenResponseError};

/// What an HTTP POST of a form returned.
#[derive(Debug, Clone)]
pub struct EndpointResponse {
    /// The HTTP status.
    pub status: u16,
    /// The body (capped by the transport).
    pub body: Vec<u8>,
}

/// A transport failure: no HTTP answer at all (refused, timed out, TLS). Never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// How a login module talks to its token endpoint: a blocking form POST. The host's HTTP client
/// implements it; tests implement it with a real local server.
pub trait TokenEndpoint: Send + Sync {
    /// POSTs `form` (URL-encoded by the transport) to `url`, with HTTP basic authentication
    /// when `basic_auth` is given.
    fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        basic_auth: Option<(&str, &Secret)>,
    ) -> Result<EndpointResponse, TransportError>;
}

/// How a token request is retried: the schedule every OAuth fetch uses
/// ([`crate::oauth::retry::Backoff`], Kafka's `Retry`), from `retry_backoff_ms` and
/// `retry_backoff_max_ms`.
pub use crate::oauth::retry::Backoff as RetryPolicy;

/// The statuses Kafka's retriever gives up on at once: the request is wrong, asking again will
/// not help.
const NOT_RETRIED: [u16; 17] = [
    400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413, 414, 415, 501, 505,
];

/// Why no token could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The endpoint could not be reached (after the retries).
    #[error("the token endpoint {url} could not be reached after {attempts} attempt(s): {error}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// How many times it was asked.
        attempts: u32,
        /// The last transport error.
        error: TransportError,
    },
    /// The endpoint answered with an error status.
    #[error("the token endpoint {url} answered HTTP {status}{}", describe(.error_code))]
    Refused {
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// The OAuth `error` code of the body (RFC 6749 §5.2), when it has one.
        error_code: Option<String>,
    },
    /// The endpoint's answer has no usable token.
    #[error("the token endpoint {url} answered with no usable token: {error}")]
    BadToken {
        /// The endpoint.
        url: String,
        /// What is wrong.
        error: TokenResponseError,
    },
}

fn describe(code: &Option<String>) -> String {
    code.as_ref().map(|c| format!(" ({c})")).unwrap_or_default()
}

/// One token request: where, with which form and client authentication.
pub struct TokenRequest<'a> {
    /// The endpoint.
    pub url: &'a str,
    /// The form.
    pub form: Vec<(&'a str, String)>,
    /// HTTP basic client authentication.
    pub basic_auth: Option<(&'a str, &'a Secret)>,
    /// The claim that names the principal in the returned token.
    pub principal_claim: &'a str,
}

/// Fetches a token, retrying as [`RetryPolicy`] says. Blocks: call it from a thread that may.
pub fn fetch_token(
    endpoint: &dyn TokenEndpoint,
    request: &TokenRequest<'_>,
    retry: RetryPolicy,
) -> Result<AccessToken, FetchError> {
    let form: Vec<(&str, &str)> = request.form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let started = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let error = match endpoint.post_form(request.url, &form, request.basic_auth) {
            Ok(response) if (200..300).contains(&response.status) => {
                return parse_token_response(&response.body, request.principal_claim).map_err(
                    |error| FetchError::BadToken {
                        url: request.url.to_owned(),
                        error,
                    },
                );
            }
            Ok(response) => {
                let refused = FetchError::Refused {
                    url: request.url.to_owned(),
                    status: response.status,
                    error_code: error_code(&response.body),
                };
                if NOT_RETRIED.contains(&response.status) {
                    return Err(refused);
                }
                refused
            }
            Err(error) => FetchError::Unreachable {
                url: request.url.to_owned(),
                attempts,
                error,
            },
        };
        let elapsed = started.elapsed();
        if elapsed >= retry.max_total {
            return Err(match error {
                FetchError::Unreachable { url, error, .. } => FetchError::Unreachable {
                    url,
                    attempts,
                    error,
                },
                other => other,
            });
        }
        // The last wait is cut to end at the deadline, where one last attempt is made.
        let wait = retry.wait_after(attempts).min(retry.max_total - elapsed);
        tracing::debug!(attempt = attempts, wait_ms = wait.as_millis() as u64, error = %error, "token request failed; retrying");
        std::thread::sleep(wait);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use std::time::Duration;

    use super::*;

    /// Answers from a script; the transport is a trait so the retry rules are tested on their
    /// own (the HTTP path is tested against a real server in host/tests).
    struct Scripted(Mutex<Vec<Result<EndpointResponse, TransportError>>>);

    impl TokenEndpoint for Scripted {
        fn post_form(
            &self,
            _url: &str,
            _form: &[(&str, &str)],
            _basic_auth: Option<(&str, &Secret)>,
        ) -> Result<EndpointResponse, TransportError> {
            self.0.lock().unwrap().remove(0)
        }
    }

    fn request() -> TokenRequest<'static> {
        TokenRequest {
            url: "http://idp/token",
            form: vec![("grant_type", "client_credentials".to_owned())],
            basic_auth: None,
            principal_claim: "sub",
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            initial: Duration::from_millis(1),
            max_total: Duration::from_millis(500),
        }
    }

    fn status(status: u16, body: &str) -> Result<EndpointResponse, TransportError> {
        Ok(EndpointResponse {
            status,
            body: body.as_bytes().to_vec(),
        })
    }

    #[test]
    fn a_401_is_not_retried_and_names_the_oauth_error() {
        let endpoint = Scripted(Mutex::new(vec![status(
            401,
            r#"{"error":"invalid_client"}"#,
        )]));
        let error = fetch_token(&endpoint, &request(), fast()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the token endpoint http://idp/token answered HTTP 401 (invalid_client)"
        );
    }

    #[test]
    fn a_503_and_a_refused_connection_are_retried() {
        let endpoint = Scripted(Mutex::new(vec![
            Err(TransportError("connection refused".into())),
            status(503, ""),
            status(500, "not json"),
            status(200, r#"{"access_token":"x"}"#),
        ]));
        let error = fetch_token(&endpoint, &request(), fast()).unwrap_err();
        assert!(matches!(error, FetchError::BadToken { .. }), "{error}");
        assert!(endpoint.0.lock().unwrap().is_empty());
    }

    #[test]
    fn retries_stop_at_the_deadline() {
        let answers = (0..100)
            .map(|_| Err(TransportError("refused".into())))
            .collect();
        let endpoint = Scripted(Mutex::new(answers));
        let policy = RetryPolicy {
            initial: Duration::from_millis(10),
            max_total: Duration::from_millis(100),
        };
        let started = Instant::now();
        let error = fetch_token(&endpoint, &request(), policy).unwrap_err();
        // Attempts at 0, 10, 30, 70 ms, then the wait (80) is cut to the deadline at 100 ms,
        // where the last one is made.
        assert!(
            matches!(error, FetchError::Unreachable { attempts: 5, .. }),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_millis(400));
    }
}
