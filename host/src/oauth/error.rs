//! Why OAUTHBEARER cannot start ([`OAuthError`]), each naming the key (and the URL) at fault.

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

pub(super) fn config_error(key: impl Into<String>, reason: impl Into<String>) -> OAuthError {
    OAuthError::Config {
        key: key.into(),
        reason: reason.into(),
    }
}
