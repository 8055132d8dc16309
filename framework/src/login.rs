//! Client-side authentication: how Portcullis authenticates its own connections to the upstream.

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
    /// A credential that never expires.
    pub fn non_expiring(principal_name: impl Into<String>) -> Self {
        Self {
            principal_name: principal_name.into(),
            start_ms: None,
            expiry_ms: None,
            absolute_last_refresh_ms: None,
        }
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

/// Produces credentials for upstream connections and drives the client half of a mechanism.
pub trait LoginModule: Send + Sync {
    /// The SASL mechanism name.
    fn mechanism(&self) -> &str;
    /// The current credential.
    fn credential(&self) -> ExpiringCredential;
    /// Starts a client exchange.
    fn start(&self) -> Box<dyn SaslClientExchange>;
    /// Logs in again and returns the new credential (e.g. fetches a new token). Modules whose
    /// credential never expires keep the default, which returns the current one.
    fn refresh(&self) -> Result<ExpiringCredential, LoginError> {
        Ok(self.credential())
    }
}

/// A client-side authentication failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("login failed: {0}")]
pub struct LoginError(pub String);
