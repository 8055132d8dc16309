//! The token endpoint over the host's HTTP client ([`crate::oauth::http`]), called the blocking
//! way the login module needs: at assembly (before any runtime exists) and from the refresh
//! scheduler's blocking-pool thread.
//!
//! Each request runs on a short-lived thread of its own with a current-thread runtime, and a
//! client built there: a token is fetched once per lifetime (minutes), so the thread costs
//! nothing that matters, and nothing ties the request to whichever runtime the caller is on
//! (a runtime cannot be blocked on from inside another, nor dropped inside one).

use std::path::PathBuf;
use std::time::Duration;

use portcullis::secret::Secret;

use super::fetch::{EndpointResponse, TokenEndpoint, TransportError};
use crate::oauth::http::HttpClient;

/// How long one token request may take (connect, send, read).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The token endpoint, over HTTP(S).
#[derive(Debug, Clone)]
pub struct HttpTokenEndpoint {
    ca_file: Option<PathBuf>,
    needs_tls: bool,
}

impl HttpTokenEndpoint {
    /// An endpoint client verifying HTTPS against `ca_file` or the system's roots.
    pub fn new(ca_file: Option<PathBuf>, needs_tls: bool) -> Self {
        Self { ca_file, needs_tls }
    }

    async fn post(
        &self,
        url: &str,
        form: &[(&str, &str)],
        basic_auth: Option<(&str, &Secret)>,
    ) -> Result<EndpointResponse, TransportError> {
        let client = HttpClient::new(self.ca_file.clone(), self.needs_tls, REQUEST_TIMEOUT)
            .map_err(|e| TransportError(e.to_string()))?;
        let url = url::Url::parse(url).map_err(|e| TransportError(e.to_string()))?;
        // Any HTTP answer goes back with its status and body: the retry rules depend on the
        // status, and a refusal's body names the OAuth error (`invalid_grant`, ...).
        match client.post_form_answer(&url, form, basic_auth).await {
            Ok((status, body)) => Ok(EndpointResponse {
                status,
                body: body.to_vec(),
            }),
            Err(other) => Err(TransportError(other.to_string())),
        }
    }
}

impl TokenEndpoint for HttpTokenEndpoint {
    fn post_form(
        &self,
        url: &str,
        form: &[(&str, &str)],
        basic_auth: Option<(&str, &Secret)>,
    ) -> Result<EndpointResponse, TransportError> {
        std::thread::scope(|scope| {
            let request = scope.spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| TransportError(format!("cannot start a runtime: {e}")))?;
                runtime.block_on(self.post(url, form, basic_auth))
            });
            request
                .join()
                .unwrap_or_else(|_| Err(TransportError("the token request panicked".to_owned())))
        })
    }
}
