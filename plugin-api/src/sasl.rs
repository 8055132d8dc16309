//! The server side of a SASL mechanism (KIP-43): a factory per mechanism and a synchronous,
//! step-by-step exchange per authentication.
//!
//! An exchange never blocks: it reads credentials through in-memory views
//! ([`crate::credentials::CredentialView`], from [`crate::Host::credentials`]) handed to the
//! mechanism when it is built.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The server side of one SASL mechanism, e.g. `SCRAM-SHA-512`.
pub trait SaslMechanism: Send + Sync {
    /// The IANA (or custom) mechanism name, as clients send it in SaslHandshake.
    fn name(&self) -> &str;
    /// Starts one authentication exchange.
    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange>;

    /// Whether every step of this mechanism's exchanges is cheap (microseconds, no blocking), so
    /// a host may run it on the async workers that serve its connections. The default, `false`,
    /// lets the host run each step where a slow one cannot hold other connections up: right for a
    /// mechanism that derives keys (PLAIN checks a password with PBKDF2) or that may block (a
    /// plugin asking a directory). Dynamic plugins always get the default.
    fn steps_are_cheap(&self) -> bool {
        false
    }
}

/// One authentication exchange: a state machine fed the client's tokens.
pub trait SaslExchange: Send {
    /// Processes the next client token. After `Complete` or `Fail` the exchange is finished and is
    /// not stepped again.
    fn step(&mut self, client_token: &[u8]) -> StepOutcome;

    /// The user name the client claimed so far, verified or not (SCRAM's `n=`, PLAIN's authcid),
    /// which a host may use to slow down repeated failures per user name; `None` (the default)
    /// leaves the host only the client's address.
    fn claimed_user(&self) -> Option<&str> {
        None
    }
}

/// What a connection knows when an exchange starts.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ExchangeContext {
    /// The client's address.
    pub client_address: IpAddr,
    /// The listener's name.
    pub listener: String,
    /// Milliseconds since the Unix epoch when the exchange starts (mechanisms never read clocks).
    pub now_ms: i64,
}

impl ExchangeContext {
    /// Creates a context.
    pub fn new(client_address: IpAddr, listener: impl Into<String>, now_ms: i64) -> Self {
        Self {
            client_address,
            listener: listener.into(),
            now_ms,
        }
    }
}

/// The result of one step.
#[derive(Debug)]
#[must_use]
#[non_exhaustive]
pub enum StepOutcome {
    /// Send these bytes to the client and wait for its next token.
    Continue(Vec<u8>),
    /// Authentication succeeded.
    Complete(Authenticated),
    /// Authentication failed.
    Fail(AuthFailure),
}

/// A successful authentication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Authenticated {
    /// The authorization id: the user name, or a delegation token's owner.
    pub authorization_id: String,
    /// The final server token (e.g. SCRAM's `v=`), possibly empty.
    pub server_final: Vec<u8>,
    /// When the credential used stops being valid, in ms since the epoch (KIP-368 `CREDENTIAL.LIFETIME.MS`).
    pub credential_expiry_ms: Option<i64>,
    /// The delegation token id, when the client authenticated with a token (`tokenauth=true`).
    pub token_id: Option<String>,
    /// Negotiated extensions (e.g. SCRAM `tokenauth`, OAUTHBEARER extensions).
    pub extensions: BTreeMap<String, String>,
    /// What verified the client, so the session can be revoked when it is removed or changed.
    /// A mechanism that reports nothing gets [`CredentialId::Plugin`](crate::credentials::CredentialId::Plugin) with its name and the
    /// authorization id (or [`CredentialId::Token`](crate::credentials::CredentialId::Token) when it reports a token id).
    pub credential: Option<crate::credentials::CredentialId>,
    /// What a bearer token said about the client (OAUTHBEARER): its scopes, its groups and its
    /// id. `None` for a mechanism without tokens. Never holds the token itself.
    pub token_claims: Option<TokenClaims>,
}

/// The facts a validated bearer token carries besides the principal name (OAUTHBEARER).
///
/// Groups become `Group:<name>` principals that ACLs may name; scopes and groups reach
/// authorizer plugins and event subscribers; the `jti` goes to the audit log (the token never
/// does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenClaims {
    /// The token's scopes (`scope_claim_name`), in the token's order, without duplicates.
    pub scopes: Vec<String>,
    /// The token's groups (`groups_claim_name`), in the token's order, without duplicates.
    pub groups: Vec<String>,
    /// The token's `jti` claim, when it has one.
    pub jti: Option<String>,
}

impl TokenClaims {
    /// Claims with these scopes, groups and token id.
    pub fn new(scopes: Vec<String>, groups: Vec<String>, jti: Option<String>) -> Self {
        Self {
            scopes,
            groups,
            jti,
        }
    }
}

impl Authenticated {
    /// A completed authentication for `authorization_id` with no final token.
    pub fn new(authorization_id: impl Into<String>) -> Self {
        Self {
            authorization_id: authorization_id.into(),
            ..Self::default()
        }
    }
    /// Sets the final server token.
    pub fn with_server_final(mut self, token: Vec<u8>) -> Self {
        self.server_final = token;
        self
    }
    /// Sets the credential expiry.
    pub fn with_credential_expiry_ms(mut self, expiry: Option<i64>) -> Self {
        self.credential_expiry_ms = expiry;
        self
    }
    /// Marks the authentication as done with a delegation token.
    pub fn with_token_id(mut self, token_id: Option<String>) -> Self {
        self.token_id = token_id;
        self
    }
    /// Says what verified the client (see [`Authenticated::credential`]).
    pub fn with_credential(mut self, credential: crate::credentials::CredentialId) -> Self {
        self.credential = Some(credential);
        self
    }
    /// Sets what a bearer token said about the client.
    pub fn with_token_claims(mut self, claims: TokenClaims) -> Self {
        self.token_claims = Some(claims);
        self
    }
    /// Sets the negotiated extensions.
    pub fn with_extensions(mut self, extensions: BTreeMap<String, String>) -> Self {
        self.extensions = extensions;
        self
    }
}

/// Why an authentication failed.
///
/// Mirrors Kafka's two exception kinds: a [`AuthFailure::Visible`] message reaches the client
/// verbatim (Kafka's `SaslAuthenticationException`), while an [`AuthFailure::Hidden`] reason is only
/// logged and the client sees the generic "invalid credentials" message, so that nothing tells an
/// attacker whether a user exists.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthFailure {
    /// A failure whose message may be shown to the client.
    Visible(String),
    /// A failure whose reason must not reach the client (it is logged, never with secrets).
    Hidden(String),
}

impl AuthFailure {
    /// The reason, for logs.
    pub fn reason(&self) -> &str {
        match self {
            AuthFailure::Visible(m) | AuthFailure::Hidden(m) => m,
        }
    }

    /// The message the client sees, given the mechanism name.
    pub fn client_message(&self, mechanism: &str, reauthentication: bool) -> String {
        match self {
            AuthFailure::Visible(m) => m.clone(),
            AuthFailure::Hidden(_) => format!(
                "Authentication failed during {} due to invalid credentials with SASL mechanism {mechanism}",
                if reauthentication { "re-authentication" } else { "authentication" }
            ),
        }
    }
}
