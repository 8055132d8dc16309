//! What a validator is asked and what it answers.

/// What a validated token yields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidatedToken {
    /// The principal name (the trimmed `sub_claim_name` claim).
    pub principal: String,
    /// When the token expires, in ms since the epoch (its `exp`): the KIP-368 credential lifetime.
    pub expiry_ms: i64,
    /// When the token was issued, in ms since the epoch (its `iat`), when it says.
    pub issued_at_ms: Option<i64>,
    /// The token's scopes, in the token's order, without duplicates.
    pub scopes: Vec<String>,
    /// The token's groups (`groups_claim_name`), in the token's order, without duplicates.
    pub groups: Vec<String>,
    /// The token's `jti` claim, when it has one.
    pub jti: Option<String>,
}

/// The status of a refused token, as the client sees it in the JSON challenge (RFC 7628 §3.2.2,
/// RFC 6750 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefusalStatus {
    /// `invalid_token`: expired, malformed, badly signed, wrong audience or issuer, …
    InvalidToken,
    /// `insufficient_scope`: a valid token without a required scope.
    InsufficientScope,
}

impl RefusalStatus {
    /// The status string of the challenge.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalStatus::InvalidToken => "invalid_token",
            RefusalStatus::InsufficientScope => "insufficient_scope",
        }
    }
}

impl std::fmt::Display for RefusalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a token was refused.
///
/// `reason` is for the log and never contains the token; the client sees only Kafka's JSON
/// challenge built from `status` (+ `scope`, + the configured openid-configuration URL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The challenge's status.
    pub status: RefusalStatus,
    /// What was wrong, for the log.
    pub reason: String,
    /// The scope the challenge names (`insufficient_scope` only).
    pub scope: Option<String>,
}

impl Refusal {
    /// An `invalid_token` refusal.
    pub fn invalid_token(reason: impl Into<String>) -> Self {
        Self {
            status: RefusalStatus::InvalidToken,
            reason: reason.into(),
            scope: None,
        }
    }

    /// An `insufficient_scope` refusal naming `scope` in the challenge.
    pub fn insufficient_scope(reason: impl Into<String>, scope: impl Into<String>) -> Self {
        Self {
            status: RefusalStatus::InsufficientScope,
            reason: reason.into(),
            scope: Some(scope.into()),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.reason)
    }
}

impl std::error::Error for Refusal {}

/// Checks a bearer token.
pub trait TokenValidator: Send + Sync {
    /// Validates `token` at `now_ms` (ms since the epoch).
    fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, Refusal>;

    /// False when [`TokenValidator::validate`] may block (introspection over the network): the
    /// host then runs the SASL step on a blocking thread.
    fn is_cheap(&self) -> bool {
        true
    }
}
