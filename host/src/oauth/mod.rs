//! OAUTHBEARER's host side: everything the sans-I/O mechanism (`portcullis-plugin-oauthbearer`)
//! needs from the network, built from `[oauthbearer]`.
//!
//! | module            | its one job                                                          |
//! |-------------------|----------------------------------------------------------------------|
//! | [`allow`]         | `allowed_urls`: which URLs may be fetched (CVE-2025-27817)           |
//! | [`http`]          | the one HTTP client: rustls, no redirects, timeout, size cap         |
//! | [`retry`]         | Kafka's retry schedule (`backoff × 2^(n−1)` within a total deadline) |
//! | [`discovery`]     | `discovery_url`: fills `jwks_url`, `introspection_url`, the issuer   |
//! | [`jwks_refresh`]  | the key set: fetched at start, refreshed periodically and on a miss  |
//! | [`introspect`]    | the RFC 7662 client the introspection validator calls                |
//!
//! [`OAuthBearer::start`] (from `Node::build`) does the start-up I/O on a small runtime of its
//! own, `portcullis-oauth` (one worker thread): discovery, then the first key set — a node whose
//! validator cannot work does not start, and the error names the URL and why. The refresher
//! task then runs there, and introspection requests too, so neither depends on which runtime
//! serves the listener (nor on whether `Node::build` was called inside one), and a blocking
//! SASL step waiting for an introspection answer never waits for a busy listener worker. The
//! runtime stops with [`OAuthBearer::shutdown`] or when the node is dropped.
//! [`OAuthBearer::offline`] builds the same mechanism without any I/O, for `check-config`.

pub mod allow;
pub mod discovery;
pub mod http;
pub mod introspect;
pub mod jwks_refresh;
pub mod retry;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::sasl::SaslMechanism;
use portcullis_plugin_oauthbearer::introspection::{
    CacheSettings, Introspect, IntrospectError, IntrospectionValidator,
};
use portcullis_plugin_oauthbearer::jwks::{
    JwksValidator, KeySet, NoRefresh, RefreshLimits, SharedKeySet,
};
use portcullis_plugin_oauthbearer::unsecured::{UnsecuredRules, UnsecuredValidator};
use portcullis_plugin_oauthbearer::{
    ClaimRules, OAuthBearerServer, Refusal, ServerSettings, TokenValidator, ValidatedToken,
};
use serde_json::{Map, Value};
use tokio::sync::watch;
use url::Url;

use crate::config::{OAuthBearerConfig, ValidatorKind};
use crate::server::tls::TlsSetupError;
use allow::AllowList;
use http::{HttpClient, HttpSetupError};
use introspect::IntrospectionClient;
use jwks_refresh::{JwksRefresher, JwksSource, RefreshSettings};
use retry::Backoff;

/// Why OAUTHBEARER cannot start. Each names the key (and the URL) at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthError {
    /// A setting cannot be used.
    #[error("{key}: {reason}")]
    Config {
        /// The dotted key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A document the validator needs could not be had at start.
    #[error(
        "{key}: cannot get the {what} from {url}: {reason} ({attempts} attempt(s) within \
         jwks_retry_backoff_max_ms = {max_ms}); OAUTHBEARER cannot verify tokens without it"
    )]
    Fetch {
        /// The key holding the URL.
        key: String,
        /// What was fetched.
        what: &'static str,
        /// The URL.
        url: String,
        /// The last attempt's error.
        reason: String,
        /// Attempts made.
        attempts: u32,
        /// The retry deadline.
        max_ms: u64,
    },
    /// The OAuth runtime cannot be started.
    #[error("cannot start the OAuth runtime: {0}")]
    Runtime(std::io::Error),
}

fn config_error(key: impl Into<String>, reason: impl Into<String>) -> OAuthError {
    OAuthError::Config {
        key: key.into(),
        reason: reason.into(),
    }
}

/// What discovery and the configuration resolved to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The key set's URL (`jwks`).
    pub jwks_url: Option<Url>,
    /// The introspection endpoint (`introspection`).
    pub introspection_url: Option<Url>,
    /// The issuer tokens must carry.
    pub expected_issuer: Option<String>,
    /// Which of these came from the discovery document.
    pub discovered: Vec<&'static str>,
}

/// The background of a started mechanism: the runtime and the refresher task's stop signal.
struct Background {
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    stop: watch::Sender<bool>,
}

impl Background {
    fn shutdown(&self) {
        // No receiver left only means the task has ended already.
        let _ = self.stop.send(true);
        let runtime = self
            .runtime
            .lock()
            .map(|mut r| r.take())
            .unwrap_or_default();
        if let Some(runtime) = runtime {
            // Never blocks (dropping a runtime inside another one would panic).
            runtime.shutdown_background();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The OAUTHBEARER mechanism the node serves, with what keeps its validator working.
pub struct OAuthBearer {
    mechanism: Arc<OAuthBearerServer>,
    kind: ValidatorKind,
    resolved: Resolved,
    refresher: Option<JwksRefresher>,
    background: Option<Background>,
}

impl std::fmt::Debug for OAuthBearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBearer")
            .field("validator", &self.kind)
            .field("resolved", &self.resolved)
            .field("refresher", &self.refresher)
            .finish_non_exhaustive()
    }
}

impl OAuthBearer {
    /// Starts OAUTHBEARER for `config`: the OAuth runtime, discovery, the first key set (with
    /// retries), the refresher task. Blocks the calling thread until that is done (at most
    /// about `jwks_retry_backoff_max_ms` + `http_timeout_ms` per document); callable from any
    /// thread, inside a runtime or not.
    ///
    /// # Errors
    /// [`OAuthError`] naming the key and URL; nothing keeps running then.
    pub fn start(config: &OAuthBearerConfig) -> Result<Self, OAuthError> {
        for warning in warnings(config) {
            tracing::warn!("{warning}");
        }
        if config.validator == ValidatorKind::Unsecured {
            // Nothing to fetch, nothing to run.
            return Self::offline(config);
        }
        let allow = config
            .allow_list()
            .map_err(|e| config_error("oauthbearer.allowed_urls", e.to_string()))?;
        let http = http_client(config, &allow)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("portcullis-oauth")
            .enable_all()
            .build()
            .map_err(OAuthError::Runtime)?;
        let (stop, stopped) = watch::channel(false);
        let background = Background {
            runtime: Mutex::new(None),
            stop,
        };
        let handle = runtime.handle().clone();
        let start_config = config.clone();
        let start_http = http.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        handle.spawn(async move {
            let _ = tx.send(start_io(&start_config, &allow, &start_http).await);
        });
        // The start-up future ends on its own (every fetch has a timeout and a deadline).
        let started = rx
            .recv()
            .map_err(|_| config_error("oauthbearer", "the OAuth runtime stopped during start-up"));
        let (resolved, refresher) = match started {
            Ok(Ok(started)) => started,
            Ok(Err(e)) | Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        if let Some(refresher) = &refresher {
            handle.spawn(refresher.run(stopped));
        }
        if let Ok(mut slot) = background.runtime.lock() {
            *slot = Some(runtime);
        }
        let validator: Arc<dyn TokenValidator> = match config.validator {
            ValidatorKind::Jwks => {
                let Some(refresher) = &refresher else {
                    return Err(config_error("oauthbearer.jwks_url", "no key set"));
                };
                // The validator limits requests per kid (Kafka's 60 s, 16 kids); the spacing
                // between refreshes is the refresher's (jwks_kid_refresh_min_interval_ms), which
                // defers a request instead of dropping it.
                let limits = RefreshLimits {
                    global_ms: 0,
                    ..RefreshLimits::default()
                };
                Arc::new(
                    JwksValidator::new(
                        refresher.keys(),
                        claim_rules(config, &resolved),
                        Arc::new(refresher.clone()),
                    )
                    .with_refresh_limits(limits),
                )
            }
            ValidatorKind::Introspection => {
                let Some(url) = resolved.introspection_url.clone() else {
                    return Err(config_error(
                        "oauthbearer.introspection_url",
                        "no introspection endpoint (not configured, not discovered)",
                    ));
                };
                let client = IntrospectionClient::new(
                    http,
                    url,
                    config.introspection_client_id.clone().unwrap_or_default(),
                    config
                        .introspection_client_secret
                        .clone()
                        .unwrap_or_else(|| portcullis::secret::Secret::new("")),
                    handle,
                );
                introspection_validator(config, &resolved, Arc::new(client))
            }
            ValidatorKind::Unsecured => unsecured_validator(config),
        };
        tracing::info!(
            validator = config.validator.name(),
            jwks_url = resolved.jwks_url.as_ref().map(Url::as_str),
            introspection_url = resolved.introspection_url.as_ref().map(Url::as_str),
            expected_issuer = resolved.expected_issuer.as_deref(),
            discovered = ?resolved.discovered,
            "OAUTHBEARER ready"
        );
        Ok(Self {
            mechanism: Arc::new(server(config, validator)),
            kind: config.validator,
            resolved,
            refresher,
            background: Some(background),
        })
    }

    /// The same mechanism without any I/O (for `check-config` and `plugins`): a jwks validator
    /// with no keys, an introspection validator whose endpoint is never called. Never used to
    /// authenticate anyone.
    ///
    /// # Errors
    /// A configured URL that is not usable.
    pub fn offline(config: &OAuthBearerConfig) -> Result<Self, OAuthError> {
        let allow = config
            .allow_list()
            .map_err(|e| config_error("oauthbearer.allowed_urls", e.to_string()))?;
        let check = |key: &str, url: &Option<String>| -> Result<Option<Url>, OAuthError> {
            url.as_deref()
                .map(|u| allow.check(u).map_err(|e| config_error(key, e.to_string())))
                .transpose()
        };
        let resolved = Resolved {
            jwks_url: check("oauthbearer.jwks_url", &config.jwks_url)?,
            introspection_url: check("oauthbearer.introspection_url", &config.introspection_url)?,
            expected_issuer: config.expected_issuer.clone(),
            discovered: Vec::new(),
        };
        let validator: Arc<dyn TokenValidator> = match config.validator {
            ValidatorKind::Jwks => Arc::new(JwksValidator::new(
                Arc::new(SharedKeySet::new(KeySet::empty())),
                claim_rules(config, &resolved),
                Arc::new(NoRefresh),
            )),
            ValidatorKind::Introspection => {
                introspection_validator(config, &resolved, Arc::new(Offline))
            }
            ValidatorKind::Unsecured => unsecured_validator(config),
        };
        Ok(Self {
            mechanism: Arc::new(server(config, validator)),
            kind: config.validator,
            resolved,
            refresher: None,
            background: None,
        })
    }

    /// The mechanism, for `listener.sasl_mechanisms`.
    pub fn mechanism(&self) -> Arc<dyn SaslMechanism> {
        Arc::clone(&self.mechanism) as Arc<dyn SaslMechanism>
    }

    /// The concrete server (tests drive exchanges with it).
    pub fn server(&self) -> &OAuthBearerServer {
        &self.mechanism
    }

    /// The key set's refresher (`validator = "jwks"`, started).
    pub fn refresher(&self) -> Option<&JwksRefresher> {
        self.refresher.as_ref()
    }

    /// The URLs and issuer in use.
    pub fn resolved(&self) -> &Resolved {
        &self.resolved
    }

    /// Stops the refresher task and the OAuth runtime (introspection then fails: call it once
    /// the listener no longer authenticates anyone). Idempotent.
    pub fn shutdown(&self) {
        if let Some(background) = &self.background {
            background.shutdown();
        }
    }
}

/// What start-up does on the OAuth runtime: discovery when it has something to fill, then the
/// first key set.
async fn start_io(
    config: &OAuthBearerConfig,
    allow: &AllowList,
    http: &HttpClient,
) -> Result<(Resolved, Option<JwksRefresher>), OAuthError> {
    let backoff = backoff(config);
    let max_ms = config.jwks_retry_backoff_max_ms;
    let checked = |key: &str, url: &Option<String>| -> Result<Option<Url>, OAuthError> {
        url.as_deref()
            .map(|u| allow.check(u).map_err(|e| config_error(key, e.to_string())))
            .transpose()
    };
    let mut resolved = Resolved {
        jwks_url: checked("oauthbearer.jwks_url", &config.jwks_url)?,
        introspection_url: checked("oauthbearer.introspection_url", &config.introspection_url)?,
        expected_issuer: config.expected_issuer.clone(),
        discovered: Vec::new(),
    };
    let wants_jwks = config.validator == ValidatorKind::Jwks && resolved.jwks_url.is_none();
    let wants_introspection =
        config.validator == ValidatorKind::Introspection && resolved.introspection_url.is_none();
    let wants_issuer =
        config.validator != ValidatorKind::Unsecured && resolved.expected_issuer.is_none();
    if let Some(discovery_url) = checked("oauthbearer.discovery_url", &config.discovery_url)? {
        if wants_jwks || wants_introspection || wants_issuer {
            let metadata = discovery::discover(http, &discovery_url, backoff)
                .await
                .map_err(|e| OAuthError::Fetch {
                    key: "oauthbearer.discovery_url".to_owned(),
                    what: "OpenID provider configuration",
                    url: discovery_url.to_string(),
                    reason: e.error.to_string(),
                    attempts: e.attempts,
                    max_ms,
                })?;
            let from_discovery = |key: &str, member: &str, value: Option<&String>| {
                let value = value.ok_or_else(|| {
                    config_error(
                        key,
                        format!(
                            "not set, and the provider configuration at {discovery_url} has no \
                             `{member}`; set {key}"
                        ),
                    )
                })?;
                discovery::check_discovered(allow, value).map_err(|reason| {
                    config_error(
                        format!("{key} (`{member}` from oauthbearer.discovery_url)"),
                        reason.to_string(),
                    )
                })
            };
            if wants_jwks {
                resolved.jwks_url = Some(from_discovery(
                    "oauthbearer.jwks_url",
                    "jwks_uri",
                    metadata.jwks_uri.as_ref(),
                )?);
                resolved.discovered.push("jwks_url");
            }
            if wants_introspection {
                resolved.introspection_url = Some(from_discovery(
                    "oauthbearer.introspection_url",
                    "introspection_endpoint",
                    metadata.introspection_endpoint.as_ref(),
                )?);
                resolved.discovered.push("introspection_url");
            }
            if wants_issuer {
                if let Some(issuer) = metadata.issuer.filter(|i| !i.trim().is_empty()) {
                    if let Some(implied) = discovery::implied_issuer(&discovery_url) {
                        if implied.trim_end_matches('/') != issuer.trim_end_matches('/') {
                            tracing::warn!(
                                discovery_url = %discovery_url,
                                issuer = %issuer,
                                "the provider configuration names another issuer than its URL \
                                 implies (OpenID Connect Discovery §4.3); tokens must carry the \
                                 document's; set expected_issuer to choose"
                            );
                        }
                    }
                    resolved.expected_issuer = Some(issuer);
                    resolved.discovered.push("expected_issuer");
                }
            }
        }
    }
    let refresher = match (config.validator, &resolved.jwks_url) {
        (ValidatorKind::Jwks, Some(url)) => {
            let source = JwksSource::new(url.clone(), http.clone());
            let settings = RefreshSettings {
                interval: Duration::from_millis(config.jwks_refresh_ms),
                backoff,
                kid_min_interval: Duration::from_millis(config.jwks_kid_refresh_min_interval_ms),
            };
            let key = if resolved.discovered.contains(&"jwks_url") {
                "oauthbearer.jwks_url (from oauthbearer.discovery_url)"
            } else {
                "oauthbearer.jwks_url"
            };
            Some(
                JwksRefresher::start(source, settings)
                    .await
                    .map_err(|e| OAuthError::Fetch {
                        key: key.to_owned(),
                        what: "key set",
                        url: url.to_string(),
                        reason: e.error.to_string(),
                        attempts: e.attempts,
                        max_ms,
                    })?,
            )
        }
        (ValidatorKind::Jwks, None) => {
            return Err(config_error(
                "oauthbearer.jwks_url",
                "required with validator = \"jwks\" (or discovery_url)",
            ))
        }
        _ => None,
    };
    Ok((resolved, refresher))
}

fn backoff(config: &OAuthBearerConfig) -> Backoff {
    Backoff {
        initial: Duration::from_millis(config.jwks_retry_backoff_ms),
        max_total: Duration::from_millis(config.jwks_retry_backoff_max_ms),
    }
}

/// The HTTP client, verifying HTTPS against `ca_file` or the system's roots (needed only when
/// an https URL is allowed).
fn http_client(config: &OAuthBearerConfig, allow: &AllowList) -> Result<HttpClient, OAuthError> {
    let needs_tls = allow.prefixes().iter().any(|p| p.starts_with("https:"));
    HttpClient::new(
        config.ca_file.clone(),
        needs_tls,
        Duration::from_millis(config.http_timeout_ms),
    )
    .map_err(|e| match e {
        HttpSetupError::Tls(TlsSetupError::NoSystemRoots(why)) => config_error(
            "oauthbearer.ca_file",
            format!(
                "no trusted root certificate found on this system ({why}); set \
                 oauthbearer.ca_file to the identity provider's CA bundle"
            ),
        ),
        other => config_error("oauthbearer.ca_file", other.to_string()),
    })
}

fn claim_rules(config: &OAuthBearerConfig, resolved: &Resolved) -> ClaimRules {
    ClaimRules {
        expected_audience: config.expected_audience.clone(),
        expected_issuer: resolved.expected_issuer.clone(),
        sub_claim_name: config.sub_claim_name.clone(),
        scope_claim_name: config.scope_claim_name.clone(),
        groups_claim_name: config.groups_claim_name.clone(),
        required_claims: config.required_claims.clone(),
        required_scopes: config.required_scopes.clone(),
        clock_skew_ms: config.clock_skew_ms(),
    }
}

fn introspection_validator(
    config: &OAuthBearerConfig,
    resolved: &Resolved,
    client: Arc<dyn Introspect>,
) -> Arc<dyn TokenValidator> {
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let cache = CacheSettings {
        capacity: config.introspection_cache_capacity,
        positive_ttl_ms: ms(config.introspection_cache_ms),
        negative_capacity: config.introspection_cache_capacity,
        negative_ttl_ms: ms(config.introspection_negative_cache_ms),
    };
    Arc::new(IntrospectionValidator::new(
        client,
        claim_rules(config, resolved),
        cache,
    ))
}

fn unsecured_validator(config: &OAuthBearerConfig) -> Arc<dyn TokenValidator> {
    Arc::new(UnsecuredValidator::new(UnsecuredRules {
        principal_claim_name: config.sub_claim_name.clone(),
        scope_claim_name: config.scope_claim_name.clone(),
        required_scopes: config.required_scopes.clone(),
        clock_skew_ms: config.clock_skew_ms(),
    }))
}

fn server(config: &OAuthBearerConfig, validator: Arc<dyn TokenValidator>) -> OAuthBearerServer {
    OAuthBearerServer::new(
        Arc::new(Logged(validator)),
        ServerSettings {
            openid_configuration: config.discovery_url.clone(),
        },
    )
}

/// Logs why a token was refused: the client sees only Kafka's JSON challenge. At debug, as
/// everything a client alone causes (docs/architecture.md, "Errors"); the reason never holds
/// the token.
struct Logged(Arc<dyn TokenValidator>);

impl TokenValidator for Logged {
    fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal> {
        let validated = self.0.validate(token, now_ms);
        if let Err(refusal) = &validated {
            tracing::debug!(status = %refusal.status, reason = %refusal.reason, "OAUTHBEARER token refused");
        }
        validated
    }

    fn is_cheap(&self) -> bool {
        self.0.is_cheap()
    }
}

/// The offline stand-in for the introspection endpoint.
struct Offline;

impl Introspect for Offline {
    fn introspect(&self, _token: &str) -> Result<Map<String, Value>, IntrospectError> {
        Err(IntrospectError::Transport(
            "offline (check-config): the introspection endpoint is not called".to_owned(),
        ))
    }
}

/// What deserves a warning at start-up and in `check-config`: the unsecured validator, plain
/// http to a host that is not loopback.
pub fn warnings(config: &OAuthBearerConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    if config.validator == ValidatorKind::Unsecured {
        warnings.push(
            "oauthbearer.validator = \"unsecured\": tokens are not signed, so anyone can log in \
             as any user (Kafka's development validator, allowed by allow_unsecured = true); \
             never use it in production"
                .to_owned(),
        );
    }
    for (key, url) in [
        ("oauthbearer.jwks_url", &config.jwks_url),
        ("oauthbearer.discovery_url", &config.discovery_url),
        ("oauthbearer.introspection_url", &config.introspection_url),
    ] {
        let Some(url) = url.as_deref().and_then(|u| Url::parse(u).ok()) else {
            continue;
        };
        if url.scheme() == "http" && !is_loopback(&url) {
            warnings.push(format!(
                "{key} = {url}: plain http to a host that is not loopback; what it answers \
                 can be changed in transit (use https)"
            ));
        }
    }
    warnings
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// One line for `check-config`.
pub fn summary(config: &OAuthBearerConfig) -> String {
    let source = match config.validator {
        ValidatorKind::Jwks => match (&config.jwks_url, &config.discovery_url) {
            (Some(url), _) => format!(
                "key set {url}, refreshed every {} ms",
                config.jwks_refresh_ms
            ),
            (None, Some(discovery)) => format!(
                "key set from the jwks_uri of {discovery}, refreshed every {} ms",
                config.jwks_refresh_ms
            ),
            (None, None) => "no key set".to_owned(),
        },
        ValidatorKind::Introspection => match (&config.introspection_url, &config.discovery_url) {
            (Some(url), _) => format!("endpoint {url}"),
            (None, Some(discovery)) => {
                format!("endpoint from the introspection_endpoint of {discovery}")
            }
            (None, None) => "no endpoint".to_owned(),
        },
        ValidatorKind::Unsecured => "UNSIGNED tokens accepted (development only)".to_owned(),
    };
    let issuer = match (&config.expected_issuer, &config.discovery_url) {
        (Some(issuer), _) => issuer.clone(),
        (None, Some(_)) if config.validator != ValidatorKind::Unsecured => {
            "from discovery".to_owned()
        }
        _ => "not checked".to_owned(),
    };
    let audience = if config.expected_audience.is_empty() {
        "not checked".to_owned()
    } else {
        config.expected_audience.join(", ")
    };
    format!(
        "{} validator ({source}); issuer {issuer}; audience {audience}; allowed URLs: {}",
        config.validator.name(),
        if config.allowed_urls.is_empty() {
            "none".to_owned()
        } else {
            config.allowed_urls.join(", ")
        }
    )
}
