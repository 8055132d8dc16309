//! The RFC 7662 introspection client behind the introspection validator: `POST token=…` with
//! HTTP basic authentication as `introspection_client_id`, answered with a JSON object.
//!
//! The validator calls it from a SASL step, which the host runs on a blocking thread (the
//! validator is not cheap: `server/client.rs`, `step_off_runtime`). The request itself runs on
//! the OAuth runtime; the calling thread waits for it, at most the HTTP timeout (plus a
//! second). Neither the token nor the secret is ever logged or put in an error.

use std::sync::Arc;
use std::time::Duration;

use portcullis::secret::Secret;
use portcullis_plugin_oauthbearer::introspection::{Introspect, IntrospectError};
use serde_json::{Map, Value};
use tokio::runtime::Handle;
use url::Url;

use super::http::{HttpClient, HttpError};

/// The client.
pub struct IntrospectionClient {
    inner: Arc<Inner>,
    runtime: Handle,
}

struct Inner {
    http: HttpClient,
    url: Url,
    client_id: String,
    secret: Secret,
}

impl std::fmt::Debug for IntrospectionClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionClient")
            .field("url", &self.inner.url.as_str())
            .field("client_id", &self.inner.client_id)
            .finish_non_exhaustive()
    }
}

impl IntrospectionClient {
    /// A client of the endpoint at `url` (already checked against `allowed_urls`), whose
    /// requests run on `runtime`.
    pub fn new(
        http: HttpClient,
        url: Url,
        client_id: String,
        secret: Secret,
        runtime: Handle,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                http,
                url,
                client_id,
                secret,
            }),
            runtime,
        }
    }

    /// The endpoint.
    pub fn url(&self) -> &Url {
        &self.inner.url
    }

    /// One request, awaited on the caller's runtime.
    ///
    /// # Errors
    /// Why there is no answer, for the log (never the token).
    pub async fn introspect_async(
        &self,
        token: &str,
    ) -> Result<Map<String, Value>, IntrospectError> {
        Inner::introspect(&self.inner, token).await
    }
}

impl Inner {
    async fn introspect(&self, token: &str) -> Result<Map<String, Value>, IntrospectError> {
        let body = self
            .http
            .post_form(
                &self.url,
                &[("token", token), ("token_type_hint", "access_token")],
                Some((&self.client_id, &self.secret)),
            )
            .await
            .map_err(|e| match e {
                HttpError::Status(status) => IntrospectError::Status(status),
                other => IntrospectError::Transport(format!("{}: {other}", self.url)),
            })?;
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(object)) => Ok(object),
            Ok(_) => Err(IntrospectError::InvalidResponse(format!(
                "{} answered JSON that is not an object",
                self.url
            ))),
            Err(e) => Err(IntrospectError::InvalidResponse(format!(
                "{} answered something that is not JSON (line {}, column {})",
                self.url,
                e.line(),
                e.column()
            ))),
        }
    }
}

impl Introspect for IntrospectionClient {
    fn introspect(&self, token: &str) -> Result<Map<String, Value>, IntrospectError> {
        let inner = Arc::clone(&self.inner);
        let token = token.to_owned();
        let wait = self.inner.http.timeout() + Duration::from_secs(1);
        let answer = run_on(&self.runtime, wait, async move {
            inner.introspect(&token).await
        });
        answer.unwrap_or_else(|| {
            Err(IntrospectError::Transport(format!(
                "{}: no answer within {} ms",
                self.inner.url,
                wait.as_millis()
            )))
        })
    }
}

/// Runs `future` on `runtime` and waits for it on this (non-async) thread, at most `wait`.
/// Safe from any thread, a runtime's worker included (it never calls `block_on`); `None` when
/// the time is up or the runtime has shut down.
pub(crate) fn run_on<T: Send + 'static>(
    runtime: &Handle,
    wait: Duration,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        // The receiver may have given up waiting.
        let _ = tx.send(future.await);
    });
    rx.recv_timeout(wait).ok()
}
