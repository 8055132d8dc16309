//! Client-side authentication: how Portcullis authenticates its own connections to the upstream
//! cluster (Kafka's `LoginModule` and the client half of a SASL mechanism).
//!
//! A [`LoginModule`] owns the credential; the host asks it for the current one when it opens or
//! re-authenticates an upstream connection, and its refresh scheduler (KIP-368 client side) calls
//! [`LoginModule::refresh`] before the credential expires.

use crate::secret::Secret;

/// A credential with a lifetime (KIP-368 `ExpiringCredential`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpiringCredential {
    /// The principal name the credential authenticates.
    pub principal_name: String,
    /// When the credential became valid, ms since the epoch, if known.
    pub start_ms: Option<i64>,
    /// When it expires, ms since the epoch, if it does.
    pub expiry_ms: Option<i64>,
    /// After this time it cannot be refreshed any more, if such a limit exists.
    pub absolute_last_refresh_ms: Option<i64>,
}

impl ExpiringCredential {
    /// A credential that never expires (the host never refreshes it).
    pub fn non_expiring(principal_name: impl Into<String>) -> Self {
        Self {
            principal_name: principal_name.into(),
            start_ms: None,
            expiry_ms: None,
            absolute_last_refresh_ms: None,
        }
    }

    /// A credential valid from `start_ms` until `expiry_ms` (ms since the epoch): the host
    /// refreshes it at about 80 % of that span (Kafka's window factor and jitter).
    pub fn expiring(principal_name: impl Into<String>, start_ms: i64, expiry_ms: i64) -> Self {
        Self {
            principal_name: principal_name.into(),
            start_ms: Some(start_ms),
            expiry_ms: Some(expiry_ms),
            absolute_last_refresh_ms: None,
        }
    }

    /// Sets the time after which the credential cannot be refreshed any more.
    pub fn with_absolute_last_refresh_ms(mut self, last: Option<i64>) -> Self {
        self.absolute_last_refresh_ms = last;
        self
    }
}

/// The client half of one SASL exchange.
pub trait SaslClientExchange: Send {
    /// The client's first token.
    fn initial(&mut self) -> Result<Vec<u8>, LoginError>;
    /// Answers a server token. `Ok(None)` means the client has nothing more to send.
    fn step(&mut self, server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError>;
    /// Whether the exchange has verified the server and is finished.
    fn is_complete(&self) -> bool;
}

/// How the host authenticates one upstream connection with a module's current credential.
///
/// Like Kafka, where a login module puts the credential into the `Subject` and the mechanism's
/// own client reads it from there, a module that authenticates with a user name and a password
/// returns [`ClientExchange::Password`] and the host runs its built-in client for the mechanism
/// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). Only a mechanism the host has no client for needs
/// [`ClientExchange::Custom`].
#[non_exhaustive]
pub enum ClientExchange {
    /// The host's client for [`LoginModule::mechanism`] with these credentials.
    Password {
        /// The user name.
        username: String,
        /// The password.
        password: Secret,
    },
    /// The module's own client exchange.
    Custom(Box<dyn SaslClientExchange>),
}

impl std::fmt::Debug for ClientExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientExchange::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .finish_non_exhaustive(),
            ClientExchange::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// Produces credentials for upstream connections.
pub trait LoginModule: Send + Sync {
    /// The SASL mechanism name.
    fn mechanism(&self) -> &str;
    /// The current credential's facts (its principal name and lifetime).
    fn credential(&self) -> ExpiringCredential;
    /// Starts authenticating one upstream connection with the current credential.
    fn start(&self) -> Result<ClientExchange, LoginError>;
    /// Logs in again and returns the new credential (e.g. fetches a new token, re-reads a
    /// password). The host calls it off the request path, before the current credential expires;
    /// connections authenticate with the new one from then on, and re-authenticate with it when
    /// their upstream session ends. Modules whose credential never expires keep the default,
    /// which returns the current one.
    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        Ok(self.credential())
    }
}

/// A client-side authentication failure (never carries a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("login failed: {0}")]
pub struct LoginError(pub String);
