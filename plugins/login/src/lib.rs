//! # portcullis-plugin-login
//!
//! Login modules for Portcullis' own connections to the upstream cluster (Kafka's
//! `PlainLoginModule` and `ScramLoginModule`): [`PlainLogin`], [`ScramLogin`], and
//! [`login_module`] to pick one by mechanism name; and the host's clients for the password
//! mechanisms, which run the exchange for any login module that answers
//! [`ClientExchange::Password`] ([`ResolvedLogin`], [`start_exchange`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Arc;

use portcullis::credentials::ScramMechanism;
use portcullis::login::{
    ClientExchange, ExpiringCredential, LoginError, LoginModule, SaslClientExchange,
};
use portcullis::plugin_api::{parse_config, NoConfig};
use portcullis::registry::{check_config, LoginModuleFactory, LoginSettings};
use portcullis::secret::Secret;
use portcullis::{Host, PluginError};
use portcullis_plugin_scram::{SaltedPasswordCache, ScramClient};

pub mod oauth_token;
pub mod oauthbearer;
mod plain;
mod scram;

pub use oauthbearer::OAuthBearerClientExchange;
pub use plain::{PlainClientExchange, PlainLogin};
pub use scram::ScramLogin;

/// No built-in login module exists for the mechanism.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no built-in login module for SASL mechanism '{0}' (supported: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")]
pub struct UnsupportedLoginMechanism(pub String);

/// The login module for `mechanism` with a user name and password.
pub fn login_module(
    mechanism: &str,
    username: impl Into<String>,
    password: Secret,
) -> Result<Arc<dyn LoginModule>, UnsupportedLoginMechanism> {
    if mechanism == plain::MECHANISM_NAME {
        return Ok(Arc::new(PlainLogin::new(username, password)));
    }
    match ScramMechanism::from_mechanism_name(mechanism) {
        Some(scram) => Ok(Arc::new(ScramLogin::new(scram, username, password))),
        None => Err(UnsupportedLoginMechanism(mechanism.to_owned())),
    }
}

/// Starts a client exchange for `login`: its own, or, for a module that hands over a user name and
/// password, the built-in client of its mechanism (without a salted-password cache; wrap the
/// module in [`ResolvedLogin`] to keep one).
///
/// # Errors
/// The module's own error, or [`LoginError`] when no built-in client exists for its mechanism.
pub fn start_exchange(login: &dyn LoginModule) -> Result<Box<dyn SaslClientExchange>, LoginError> {
    resolve(login.mechanism(), login.start()?, None)
}

fn resolve(
    mechanism: &str,
    start: ClientExchange,
    cache: Option<&Arc<SaltedPasswordCache>>,
) -> Result<Box<dyn SaslClientExchange>, LoginError> {
    match start {
        ClientExchange::Custom(exchange) => Ok(exchange),
        ClientExchange::Password { username, password } => {
            if mechanism == plain::MECHANISM_NAME {
                return Ok(Box::new(PlainClientExchange::new(username, password)));
            }
            let Some(scram) = ScramMechanism::from_mechanism_name(mechanism) else {
                return Err(LoginError(format!(
                    "no built-in client for SASL mechanism {mechanism} (a login module that \
                     hands over a password needs PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
                )));
            };
            let client = ScramClient::new(scram, username, password);
            Ok(Box::new(match cache {
                Some(cache) => client.with_cache(Arc::clone(cache)),
                None => client,
            }))
        }
        _ => Err(LoginError(
            "the login module returned a kind of client exchange this host does not know"
                .to_owned(),
        )),
    }
}

/// A login module whose [`LoginModule::start`] always answers [`ClientExchange::Custom`]: a
/// module that hands over a password gets the built-in client of its mechanism, with one
/// salted-password cache for all its exchanges (so re-authentications skip PBKDF2 until the
/// password or the server's salt changes). The host wraps every login module in one.
pub struct ResolvedLogin {
    module: Arc<dyn LoginModule>,
    cache: Arc<SaltedPasswordCache>,
}

impl ResolvedLogin {
    /// Wraps `module`.
    pub fn new(module: Arc<dyn LoginModule>) -> Self {
        Self {
            module,
            cache: Arc::new(SaltedPasswordCache::new()),
        }
    }
}

impl std::fmt::Debug for ResolvedLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedLogin")
            .field("mechanism", &self.module.mechanism())
            .finish_non_exhaustive()
    }
}

impl LoginModule for ResolvedLogin {
    fn mechanism(&self) -> &str {
        self.module.mechanism()
    }
    fn credential(&self) -> ExpiringCredential {
        self.module.credential()
    }
    fn start(&self) -> Result<ClientExchange, LoginError> {
        let start = self.module.start()?;
        resolve(self.module.mechanism(), start, Some(&self.cache)).map(ClientExchange::Custom)
    }
    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        self.module.refresh()
    }
}

/// The name of the built-in login module: `[upstream]`'s `sasl_mechanism`, `username` and
/// `password` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), used when `[upstream.login]` names none.
pub const PASSWORD_LOGIN: &str = "password";

fn build_password_login(
    config: &str,
    _host: &Host,
    settings: &LoginSettings,
) -> Result<Arc<dyn LoginModule>, PluginError> {
    parse_config::<NoConfig>(config)?;
    let (Some(mechanism), Some(username), Some(password)) = (
        settings.mechanism.as_deref(),
        settings.username.as_deref(),
        settings.password.as_ref(),
    ) else {
        return Err(PluginError::invalid_value(
            "upstream",
            "the password login needs upstream.sasl_mechanism, username and password",
        ));
    };
    login_module(mechanism, username, password.clone())
        .map_err(|e| PluginError::invalid_value("upstream.sasl_mechanism", e.to_string()))
}

inventory::submit! {
    LoginModuleFactory {
        name: PASSWORD_LOGIN,
        build: build_password_login,
        check_config: check_config::<NoConfig>,
    }
}
