//! The HTTP client every OAuth fetch goes through (JWKS, discovery, introspection, and the
//! upstream login module's token endpoint): `reqwest` without default features, on the rustls
//! client configuration `server::tls` builds (ring provider; the system's roots or `ca_file`).
//!
//! What it guarantees, whoever calls it:
//!
//! - **no redirects**: a 3xx answer is an error naming where it pointed, since following it
//!   could leave `allowed_urls`;
//! - **one timeout** per request, for connecting, sending and reading the whole answer;
//! - **a size cap** ([`MAX_RESPONSE_BYTES`]): a larger answer is an error, read no further;
//! - `file:` URLs are read from disk under the same cap;
//! - errors never hold a request body (a token, a client secret) or a response body.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use portcullis::secret::Secret;
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION};
use url::Url;

use crate::config::UpstreamTlsConfig;
use crate::server::tls::{self, TlsSetupError};

/// The largest answer read from a provider (a JWKS of a few dozen keys is ~50 KiB).
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Why a fetch failed. Never holds a secret or a body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// Connecting, TLS, sending or reading failed.
    #[error("{0}")]
    Transport(String),
    /// The request took longer than the timeout.
    #[error("no complete answer within {0} ms")]
    Timeout(u64),
    /// The answer's status is not 2xx.
    #[error("HTTP status {0}")]
    Status(u16),
    /// The answer is a redirect, which is not followed.
    #[error("HTTP status {status}: a redirect (to {location}), which is not followed: it could leave allowed_urls; configure the final URL")]
    Redirect {
        /// The status.
        status: u16,
        /// Where it pointed (or `?`).
        location: String,
    },
    /// The answer is larger than [`MAX_RESPONSE_BYTES`].
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// A `file:` URL could not be read.
    #[error("cannot read {}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The client, cheap to clone (one connection pool).
#[derive(Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    timeout: Duration,
    max_bytes: usize,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("timeout", &self.timeout)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// Why the client cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    /// The TLS configuration (CA file, system roots).
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// reqwest refused the configuration.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

impl HttpClient {
    /// A client that verifies HTTPS servers against `ca_file`, or the system's trusted roots.
    /// With `needs_tls` false (no https URL configured) a machine without system roots is no
    /// error: the client then trusts nothing and refuses every https URL.
    ///
    /// # Errors
    /// [`HttpSetupError`]: an unreadable CA file, no system roots while https is needed.
    pub fn new(
        ca_file: Option<PathBuf>,
        needs_tls: bool,
        timeout: Duration,
    ) -> Result<Self, HttpSetupError> {
        let tls_settings = UpstreamTlsConfig {
            ca_file,
            ..UpstreamTlsConfig::default()
        };
        let mut tls_config = match tls::client_config(&tls_settings) {
            Ok(config) => config,
            Err(TlsSetupError::NoSystemRoots(_)) if !needs_tls => empty_trust()?,
            Err(e) => return Err(e.into()),
        };
        tls_config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("portcullis/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HttpSetupError::Client(chain(&e)))?;
        Ok(Self {
            client,
            timeout,
            max_bytes: MAX_RESPONSE_BYTES,
        })
    }

    /// The same client with another size cap (tests).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// GETs `url` (or reads it, for `file:`) and returns the body of a 2xx answer.
    ///
    /// # Errors
    /// [`HttpError`].
    pub async fn get(&self, url: &Url) -> Result<Bytes, HttpError> {
        if url.scheme() == "file" {
            return self.read_file(url).await;
        }
        let request = self
            .client
            .get(url.clone())
            .header(ACCEPT, "application/json");
        self.send(request).await
    }

    /// The POST of a form, with HTTP basic authentication when given.
    fn form_request(
        &self,
        url: &Url,
        fields: &[(&str, &str)],
        basic: Option<(&str, &Secret)>,
    ) -> Result<reqwest::RequestBuilder, HttpError> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut request = self
            .client
            .post(url.clone())
            .header(ACCEPT, "application/json")
            .header(
                CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            )
            .body(body);
        if let Some((id, secret)) = basic {
            request = request.header(AUTHORIZATION, basic_auth(id, secret)?);
        }
        Ok(request)
    }

    /// POSTs the form `fields` (`application/x-www-form-urlencoded`) to `url`, with HTTP basic
    /// authentication as `client_id` when given (RFC 6749 §2.3.1: both halves form-encoded
    /// first), and returns the body of a 2xx answer.
    ///
    /// # Errors
    /// [`HttpError`].
    pub async fn post_form(
        &self,
        url: &Url,
        fields: &[(&str, &str)],
        basic: Option<(&str, &Secret)>,
    ) -> Result<Bytes, HttpError> {
        let request = self.form_request(url, fields, basic)?;
        self.send(request).await
    }

    /// As [`Self::post_form`], but an answer of any status other than a redirect is returned with
    /// its status and body (under the same cap): a token endpoint's refusal is a JSON body
    /// (`{"error":"invalid_grant"}`, RFC 6749 §5.2) that says why, and whether to retry.
    ///
    /// # Errors
    /// [`HttpError`], never [`HttpError::Status`].
    pub async fn post_form_answer(
        &self,
        url: &Url,
        fields: &[(&str, &str)],
        basic: Option<(&str, &Secret)>,
    ) -> Result<(u16, Bytes), HttpError> {
        let request = self.form_request(url, fields, basic)?;
        self.answer(request).await
    }

    /// A 2xx answer's body.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Bytes, HttpError> {
        match self.answer(request).await? {
            (status, body) if (200..300).contains(&status) => Ok(body),
            (status, _) => Err(HttpError::Status(status)),
        }
    }

    /// The status and body of an answer that is not a redirect. A non-2xx answer's body is read
    /// under the same cap.
    async fn answer(&self, request: reqwest::RequestBuilder) -> Result<(u16, Bytes), HttpError> {
        let mut response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .map_or_else(|| "?".to_owned(), str::to_owned);
            return Err(HttpError::Redirect {
                status: status.as_u16(),
                location,
            });
        }
        if response
            .content_length()
            .is_some_and(|len| len > self.max_bytes as u64)
        {
            return Err(HttpError::TooLarge(self.max_bytes));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(&e))? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(HttpError::TooLarge(self.max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status.as_u16(), Bytes::from(body)))
    }

    async fn read_file(&self, url: &Url) -> Result<Bytes, HttpError> {
        let path = url.to_file_path().map_err(|()| HttpError::File {
            path: PathBuf::from(url.path()),
            reason: "not a local file path".to_owned(),
        })?;
        let file_error = |e: std::io::Error| HttpError::File {
            path: path.clone(),
            reason: e.to_string(),
        };
        let meta = tokio::fs::metadata(&path).await.map_err(file_error)?;
        if meta.len() > self.max_bytes as u64 {
            return Err(HttpError::TooLarge(self.max_bytes));
        }
        let bytes = tokio::fs::read(&path).await.map_err(file_error)?;
        if bytes.len() > self.max_bytes {
            return Err(HttpError::TooLarge(self.max_bytes));
        }
        Ok(Bytes::from(bytes))
    }

    fn transport(&self, e: &reqwest::Error) -> HttpError {
        if e.is_timeout() {
            HttpError::Timeout(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
        } else {
            HttpError::Transport(chain(e))
        }
    }
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))`, marked sensitive (never logged by the
/// HTTP stack).
fn basic_auth(id: &str, secret: &Secret) -> Result<HeaderValue, HttpError> {
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(id), encode(secret.expose()));
    let header = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    );
    let mut value = HeaderValue::from_str(&header)
        .map_err(|_| HttpError::Transport("the client id cannot be sent in a header".to_owned()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// A client configuration that trusts no certificate (no https URL is configured and the system
/// has no roots).
fn empty_trust() -> Result<rustls::ClientConfig, HttpSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpSetupError::Client(e.to_string()))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

/// An error and its causes, `: `-joined (reqwest's own text is only the outermost layer).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_form_encodes_both_halves() {
        let header = basic_auth("my client", &Secret::new("p:w&d")).unwrap();
        assert!(header.is_sensitive());
        let text = header.to_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text.strip_prefix("Basic ").unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), "my+client:p%3Aw%26d");
    }

    #[test]
    fn a_client_builds_without_tls_needs() {
        assert!(HttpClient::new(None, false, Duration::from_secs(1)).is_ok());
        let missing = HttpClient::new(
            Some(PathBuf::from("/nonexistent/ca.pem")),
            true,
            Duration::from_secs(1),
        );
        assert!(missing.is_err());
    }
}
