//! Why a principal's upstream token could not be had ([`DelegatedError`]), and what its client is
//! told.

use portcullis::errors::ErrorCode;

/// Why a principal's upstream token could not be had. Never carries a secret.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DelegatedError {
    /// The upstream refused to create the token.
    #[error("the upstream refused to create a delegation token owned by {owner}: {code}{hint}")]
    Refused {
        /// The owner asked for.
        owner: String,
        /// Kafka's error code.
        code: ErrorCode,
        /// What to fix.
        hint: String,
    },
    /// The service connection failed.
    #[error("cannot reach the upstream for token operations: {0}")]
    Upstream(String),
    /// The upstream is too old for tokens owned by another principal.
    #[error("the upstream does not support CreateDelegationToken v3 (tokens owned by another principal, KIP-373)")]
    Unsupported,
    /// The policy routed the request as the client's principal, but the node is not configured
    /// for it (fail closed: never the service identity instead).
    #[error("a request was routed upstream as the client's principal, but [forwarding] policy is not \"delegated\"")]
    NotConfigured,
    /// The node is stopping: no new upstream token is created.
    #[error("Portcullis is stopping")]
    Stopping,
}

impl DelegatedError {
    /// What the client is told when its authentication fails for this (SaslAuthenticate's error
    /// message, shown by every client): the missing upstream permission, without the service
    /// principal's name or the operator's fix, which only the log carries.
    pub fn client_message(&self) -> String {
        let reason = match self {
            DelegatedError::Refused { owner, code, .. } => {
                let needs = match code.0 {
                    65 => format!(
                        ": Portcullis' upstream service principal needs CreateTokens on {owner}"
                    ),
                    61 => ": delegation tokens are disabled on the upstream cluster".to_owned(),
                    _ => String::new(),
                };
                format!(
                    "the upstream refused to create a delegation token owned by {owner} ({}){needs}",
                    code.name()
                )
            }
            DelegatedError::Upstream(_) => "the upstream cannot be reached".to_owned(),
            other => other.to_string(),
        };
        format!("Portcullis cannot act as the client upstream (forwarding policy \"delegated\"): {reason}")
    }
}
