//! The upstream OAuth login modules: Portcullis logs in to OAUTHBEARER brokers with a token from
//! the organisation's identity provider, as Kafka's `OAuthBearerLoginCallbackHandler` does.
//!
//! - `oauth-client-credentials`: the client-credentials grant (client id and secret, HTTP basic).
//! - `oauth-jwt-bearer`: the JWT-bearer grant of KIP-1139 (an assertion signed with a private key).
//!
//! The first token is fetched when the node is assembled (a node that cannot log in upstream does
//! not start). After that the host's refresh scheduler calls [`LoginModule::refresh`] on Kafka's
//! schedule (§2.6: 80 % of the lifetime, jittered, with its buffers) on the blocking pool, and
//! upstream connections re-authenticate with the new token when their session ends (KIP-368,
//! client side). The token endpoint is host I/O: the exchange itself
//! ([`portcullis_plugin_login::OAuthBearerClientExchange`]) only frames the token.

mod assertion;
mod config;
mod fetch;
mod token;
mod transport;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};
use portcullis::registry::{LoginModuleFactory, LoginSettings};
use portcullis::secret::Secret;
use portcullis::{Host, PluginError};
use portcullis_plugin_login::OAuthBearerClientExchange;

pub use assertion::{AssertionError, AssertionSettings, AssertionSigner};
pub use config::{OAuthLoginConfig, CLIENT_SECRET_ENV};

use crate::oauth::allow::{self, AllowList};
pub use fetch::{
    fetch_token, EndpointResponse, FetchError, RetryPolicy, TokenEndpoint, TokenRequest,
    TransportError,
};
pub use token::{parse_access_token, parse_token_response, AccessToken, TokenResponseError};

/// The client-credentials login module's name (`[upstream.login] plugin = "…"`).
pub const CLIENT_CREDENTIALS: &str = "oauth-client-credentials";
/// The JWT-bearer login module's name.
pub const JWT_BEARER: &str = "oauth-jwt-bearer";

/// The grant type of RFC 7523 §2.1.
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// How the module proves who it is to the token endpoint.
enum Grant {
    ClientCredentials { client_id: String, secret: Secret },
    JwtBearer(AssertionSigner),
}

/// An OAuth login module (either grant).
pub struct OAuthLogin {
    config: OAuthLoginConfig,
    grant: Grant,
    endpoint: Arc<dyn TokenEndpoint>,
    current: Mutex<AccessToken>,
}

/// Why an OAuth login module cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum OAuthLoginError {
    /// A key has a value that cannot be used.
    #[error("{key}: {message}")]
    Invalid {
        /// The key (of the plugin's table).
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The assertion key cannot be loaded.
    #[error("assertion_private_key_file: {0}")]
    Assertion(#[from] AssertionError),
    /// The first token cannot be had.
    #[error("the first upstream OAuth token: {0}")]
    Fetch(#[from] FetchError),
}

fn invalid(key: &'static str, message: impl Into<String>) -> OAuthLoginError {
    OAuthLoginError::Invalid {
        key,
        message: message.into(),
    }
}

impl OAuthLogin {
    /// Checks `config` for the grant `name`, and fetches the first token.
    pub fn start(
        name: &str,
        mut config: OAuthLoginConfig,
        endpoint: Arc<dyn TokenEndpoint>,
        now_ms: i64,
    ) -> Result<Self, OAuthLoginError> {
        let allowed = AllowList::new(&config.allowed_urls)
            .map_err(|e| invalid("allowed_urls", e.to_string()))?;
        let url = allow::parse_url(&config.token_endpoint_url)
            .map_err(|e| invalid("token_endpoint_url", e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(
                "token_endpoint_url",
                "must be an http:// or https:// URL",
            ));
        }
        if !allowed.allows(&url) {
            return Err(invalid(
                "token_endpoint_url",
                format!(
                    "`{url}` does not start with any of allowed_urls {:?} (CVE-2025-27817: \
                     Portcullis fetches only from URLs the operator allowed)",
                    allowed.prefixes()
                ),
            ));
        }
        if config.retry_backoff_ms == 0 || config.retry_backoff_max_ms < config.retry_backoff_ms {
            return Err(invalid(
                "retry_backoff_max_ms",
                "retry_backoff_ms must be > 0 and at most retry_backoff_max_ms",
            ));
        }
        if let Ok(secret) = std::env::var(CLIENT_SECRET_ENV) {
            config.client_secret = Some(Secret::new(secret));
        }
        let grant = if name == JWT_BEARER {
            let key_file = config.assertion_private_key_file.clone().ok_or_else(|| {
                invalid(
                    "assertion_private_key_file",
                    "required by the JWT-bearer grant",
                )
            })?;
            let client = config.client_id.clone();
            let issuer = config.assertion_issuer.clone().or_else(|| client.clone());
            let subject = config.assertion_subject.clone().or(client);
            let (Some(issuer), Some(subject)) = (issuer, subject) else {
                return Err(invalid(
                    "assertion_issuer",
                    "set assertion_issuer and assertion_subject (or client_id)",
                ));
            };
            if config.assertion_lifetime_seconds <= 0 || config.assertion_not_before_seconds < 0 {
                return Err(invalid(
                    "assertion_lifetime_seconds",
                    "the lifetime must be > 0 and not_before ≥ 0",
                ));
            }
            let settings = AssertionSettings {
                algorithm: assertion::parse_algorithm(&config.assertion_algorithm)?,
                key_id: config.assertion_key_id.clone(),
                issuer,
                subject,
                audience: config
                    .assertion_audience
                    .clone()
                    .unwrap_or_else(|| config.token_endpoint_url.clone()),
                lifetime_seconds: config.assertion_lifetime_seconds,
                not_before_seconds: config.assertion_not_before_seconds,
                include_jti: config.assertion_include_jti,
            };
            Grant::JwtBearer(AssertionSigner::load(&key_file, settings)?)
        } else {
            let client_id = config
                .client_id
                .clone()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| invalid("client_id", "required by the client-credentials grant"))?;
            let secret = config.client_secret.clone().ok_or_else(|| {
                invalid(
                    "client_secret",
                    format!(
                        "required by the client-credentials grant (or set {CLIENT_SECRET_ENV})"
                    ),
                )
            })?;
            Grant::ClientCredentials { client_id, secret }
        };
        let mut module = Self {
            config,
            grant,
            endpoint,
            current: Mutex::new(AccessToken {
                token: Secret::default(),
                principal: String::new(),
                issued_at_ms: None,
                expiry_ms: 0,
            }),
        };
        let first = module.fetch(now_ms).map_err(|e| match e {
            FetchOrSign::Fetch(f) => OAuthLoginError::Fetch(f),
            FetchOrSign::Sign(s) => OAuthLoginError::Assertion(s),
        })?;
        module.current = Mutex::new(first);
        Ok(module)
    }

    fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            initial: Duration::from_millis(self.config.retry_backoff_ms),
            max_total: Duration::from_millis(self.config.retry_backoff_max_ms),
        }
    }

    /// One token request, with its retries.
    fn fetch(&self, now_ms: i64) -> Result<AccessToken, FetchOrSign> {
        let c = &self.config;
        let mut form: Vec<(&str, String)> = Vec::with_capacity(4);
        let mut basic_auth = None;
        match &self.grant {
            Grant::ClientCredentials { client_id, secret } => {
                form.push(("grant_type", "client_credentials".to_owned()));
                basic_auth = Some((client_id.as_str(), secret));
            }
            Grant::JwtBearer(signer) => {
                form.push(("grant_type", JWT_BEARER_GRANT.to_owned()));
                form.push(("assertion", signer.sign(now_ms).map_err(FetchOrSign::Sign)?));
            }
        }
        for (key, value) in [
            ("scope", &c.scope),
            ("audience", &c.audience),
            ("resource", &c.resource),
        ] {
            if let Some(value) = value {
                form.push((key, value.clone()));
            }
        }
        let request = TokenRequest {
            url: &c.token_endpoint_url,
            form,
            basic_auth,
            principal_claim: &c.principal_claim_name,
        };
        fetch_token(self.endpoint.as_ref(), &request, self.retry()).map_err(FetchOrSign::Fetch)
    }

    fn credential_of(token: &AccessToken, fetched_at_ms: i64) -> ExpiringCredential {
        ExpiringCredential::expiring(
            token.principal.clone(),
            token.issued_at_ms.unwrap_or(fetched_at_ms),
            token.expiry_ms,
        )
    }
}

enum FetchOrSign {
    Fetch(FetchError),
    Sign(AssertionError),
}

impl std::fmt::Display for FetchOrSign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchOrSign::Fetch(e) => e.fmt(f),
            FetchOrSign::Sign(e) => e.fmt(f),
        }
    }
}

impl std::fmt::Debug for OAuthLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthLogin")
            .field("token_endpoint_url", &self.config.token_endpoint_url)
            .finish_non_exhaustive()
    }
}

impl LoginModule for OAuthLogin {
    fn mechanism(&self) -> &str {
        portcullis_plugin_login::oauthbearer::MECHANISM_NAME
    }

    fn credential(&self) -> ExpiringCredential {
        match self.current.lock() {
            Ok(token) => Self::credential_of(&token, crate::services::now_ms()),
            // Poisoned only by a panic while swapping tokens; the next refresh heals it.
            Err(poisoned) => Self::credential_of(&poisoned.into_inner(), crate::services::now_ms()),
        }
    }

    fn start(&self) -> Result<ClientExchange, LoginError> {
        let token = match self.current.lock() {
            Ok(token) => token.token.clone(),
            Err(poisoned) => poisoned.into_inner().token.clone(),
        };
        Ok(ClientExchange::Custom(Box::new(
            OAuthBearerClientExchange::new(token),
        )))
    }

    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        let now = crate::services::now_ms();
        let token = self.fetch(now).map_err(|e| LoginError(e.to_string()))?;
        let credential = Self::credential_of(&token, now);
        tracing::info!(
            principal = %token.principal,
            expires_in_ms = token.expiry_ms - now,
            "upstream OAuth token fetched"
        );
        match self.current.lock() {
            Ok(mut current) => *current = token,
            Err(poisoned) => *poisoned.into_inner() = token,
        }
        Ok(credential)
    }
}

fn build(
    name: &'static str,
    text: &str,
    _host: &Host,
) -> Result<Arc<dyn LoginModule>, PluginError> {
    let config: OAuthLoginConfig = portcullis::plugin_api::parse_config(text)?;
    let endpoint = Arc::new(transport::HttpTokenEndpoint::new(
        config.ca_file.clone(),
        config.token_endpoint_url.starts_with("https://"),
    ));
    let module = OAuthLogin::start(name, config, endpoint, crate::services::now_ms()).map_err(
        |e| match e {
            OAuthLoginError::Invalid { key, message } => PluginError::invalid_value(key, message),
            other => PluginError::startup(other),
        },
    )?;
    Ok(Arc::new(module))
}

fn build_client_credentials(
    text: &str,
    host: &Host,
    _settings: &LoginSettings,
) -> Result<Arc<dyn LoginModule>, PluginError> {
    build(CLIENT_CREDENTIALS, text, host)
}

fn build_jwt_bearer(
    text: &str,
    host: &Host,
    _settings: &LoginSettings,
) -> Result<Arc<dyn LoginModule>, PluginError> {
    build(JWT_BEARER, text, host)
}

inventory::submit! {
    LoginModuleFactory {
        name: CLIENT_CREDENTIALS,
        build: build_client_credentials,
        check_config: portcullis::registry::check_config::<OAuthLoginConfig>,
    }
}

inventory::submit! {
    LoginModuleFactory {
        name: JWT_BEARER,
        build: build_jwt_bearer,
        check_config: portcullis::registry::check_config::<OAuthLoginConfig>,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use base64::Engine;

    /// A token endpoint that records each request and answers with a fresh JWT whose `exp` is
    /// 60 s after a counter (the HTTP path is tested against a real provider in
    /// tests/interop/test_oauth_upstream.py and test_oauth_jwt_bearer.py).
    /// One request as the endpoint saw it: the form, and `id:secret` of its basic auth.
    type Seen = (Vec<(String, String)>, Option<String>);

    #[derive(Default)]
    struct Recording {
        requests: Mutex<Vec<Seen>>,
    }

    impl TokenEndpoint for Recording {
        fn post_form(
            &self,
            _url: &str,
            form: &[(&str, &str)],
            basic_auth: Option<(&str, &Secret)>,
        ) -> Result<EndpointResponse, TransportError> {
            let mut requests = self.requests.lock().unwrap();
            requests.push((
                form.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                basic_auth.map(|(id, secret)| format!("{id}:{}", secret.expose())),
            ));
            let n = requests.len() as i64;
            let b64 = |s: String| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
            let token = format!(
                "{}.{}.sig",
                b64(r#"{"alg":"RS256"}"#.to_owned()),
                b64(format!(r#"{{"sub":"svc","iat":{n},"exp":{}}}"#, n + 60))
            );
            Ok(EndpointResponse {
                status: 200,
                body: format!(r#"{{"access_token":"{token}"}}"#).into_bytes(),
            })
        }
    }

    fn config(text: &str) -> OAuthLoginConfig {
        portcullis::plugin_api::parse_config(text).unwrap()
    }

    const CLIENT: &str = r#"
        token_endpoint_url = "https://idp.example/token"
        allowed_urls = ["https://idp.example/"]
        client_id = "portcullis"
        client_secret = "s3cret"
        scope = "kafka"
        resource = "urn:kafka"
    "#;

    #[test]
    fn client_credentials_fetch_at_start_and_on_refresh() {
        let endpoint = Arc::new(Recording::default());
        let login =
            OAuthLogin::start(CLIENT_CREDENTIALS, config(CLIENT), endpoint.clone(), 0).unwrap();
        assert_eq!(login.mechanism(), "OAUTHBEARER");
        let first = login.credential();
        assert_eq!(first.principal_name, "svc");
        assert_eq!(
            (first.start_ms, first.expiry_ms),
            (Some(1000), Some(61_000))
        );
        let refreshed = login.refresh().unwrap();
        assert_eq!(refreshed.expiry_ms, Some(62_000));
        let requests = endpoint.requests.lock().unwrap();
        assert_eq!(requests.len(), 2);
        let (form, basic) = &requests[0];
        assert_eq!(basic.as_deref(), Some("portcullis:s3cret"));
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            form,
            [
                ("grant_type", "client_credentials"),
                ("scope", "kafka"),
                ("resource", "urn:kafka")
            ]
        );
    }

    #[test]
    fn the_exchange_presents_the_current_token() {
        let login = OAuthLogin::start(
            CLIENT_CREDENTIALS,
            config(CLIENT),
            Arc::new(Recording::default()),
            0,
        )
        .unwrap();
        let ClientExchange::Custom(mut exchange) = login.start().unwrap() else {
            panic!("expected the module's own exchange");
        };
        let initial = exchange.initial().unwrap();
        assert!(initial.starts_with(b"n,,\x01auth=Bearer "));
        assert!(initial.ends_with(b"\x01\x01"));
    }

    #[test]
    fn urls_outside_the_allow_list_are_refused_before_any_request() {
        let endpoint = Arc::new(Recording::default());
        let text = CLIENT.replace("https://idp.example/\"]", "https://other.example/\"]");
        let error = OAuthLogin::start(CLIENT_CREDENTIALS, config(&text), endpoint.clone(), 0)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("token_endpoint_url: "), "{error}");
        assert!(endpoint.requests.lock().unwrap().is_empty());
        let text = CLIENT.replace("https://idp.example/token", "file:///etc/passwd");
        let text = text.replace("https://idp.example/\"]", "file:///etc/\"]");
        assert!(OAuthLogin::start(CLIENT_CREDENTIALS, config(&text), endpoint, 0).is_err());
    }

    #[test]
    fn missing_client_credentials_name_the_key() {
        let text = CLIENT.replace("client_secret = \"s3cret\"", "");
        if std::env::var(CLIENT_SECRET_ENV).is_err() {
            let error = OAuthLogin::start(
                CLIENT_CREDENTIALS,
                config(&text),
                Arc::new(Recording::default()),
                0,
            )
            .unwrap_err()
            .to_string();
            assert!(error.starts_with("client_secret: "), "{error}");
        }
        let error = OAuthLogin::start(
            JWT_BEARER,
            config(CLIENT),
            Arc::new(Recording::default()),
            0,
        )
        .unwrap_err()
        .to_string();
        assert!(error.starts_with("assertion_private_key_file: "), "{error}");
    }

    #[test]
    fn the_jwt_bearer_grant_sends_a_signed_assertion() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("key.pem");
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let text = format!(
            r#"
            token_endpoint_url = "https://idp.example/token"
            allowed_urls = ["https://idp.example/"]
            client_id = "portcullis"
            assertion_private_key_file = "{}"
            assertion_algorithm = "ES256"
            assertion_key_id = "k1"
            "#,
            key_file.display()
        );
        let endpoint = Arc::new(Recording::default());
        OAuthLogin::start(
            JWT_BEARER,
            config(&text),
            endpoint.clone(),
            1_700_000_000_000,
        )
        .unwrap();
        let requests = endpoint.requests.lock().unwrap();
        let (form, basic) = &requests[0];
        assert_eq!(basic, &None);
        assert_eq!(form[0], ("grant_type".into(), JWT_BEARER_GRANT.into()));
        let assertion = &form[1].1;
        let public =
            jsonwebtoken::DecodingKey::from_ec_pem(key.public_key_pem().as_bytes()).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        validation.validate_exp = false;
        validation.set_audience(&["https://idp.example/token"]);
        let decoded =
            jsonwebtoken::decode::<serde_json::Value>(assertion, &public, &validation).unwrap();
        assert_eq!(decoded.header.kid.as_deref(), Some("k1"));
        let claims = decoded.claims;
        assert_eq!(claims["iss"], "portcullis");
        assert_eq!(claims["sub"], "portcullis");
        assert_eq!(claims["iat"], 1_700_000_000);
        assert_eq!(claims["exp"], 1_700_000_300);
        assert_eq!(claims["nbf"], 1_699_999_940);
        assert_eq!(claims["jti"].as_str().map(str::len), Some(32));
    }
}
