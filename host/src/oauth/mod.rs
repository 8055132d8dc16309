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
//! | `error`           | why OAUTHBEARER cannot start, naming the key and URL at fault        |
//! | `resolve`         | the start-up I/O: discovery, then the first key set                  |
//! | `validator`       | the token validator and server built from `[oauthbearer]`            |
//! | `report`          | the start-up warnings and `check-config`'s summary line              |
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
mod error;
pub mod http;
pub mod introspect;
pub mod jwks_refresh;
mod report;
mod resolve;
pub mod retry;
mod validator;

use std::sync::{Arc, Mutex};

use portcullis::sasl::SaslMechanism;
use portcullis_plugin_oauthbearer::jwks::{
    JwksValidator, KeySet, NoRefresh, RefreshLimits, SharedKeySet,
};
use portcullis_plugin_oauthbearer::{OAuthBearerServer, TokenValidator};
use tokio::sync::watch;
use url::Url;

use crate::config::{OAuthBearerConfig, ValidatorKind};
use introspect::IntrospectionClient;
use jwks_refresh::JwksRefresher;

pub use error::OAuthError;
pub use report::{summary, warnings};
pub use resolve::Resolved;

use error::config_error;
use resolve::start_io;
use validator::{
    claim_rules, http_client, introspection_validator, server, unsecured_validator, Offline,
};

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
