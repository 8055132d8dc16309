//! The PLAIN server: one client message, one empty answer.

use std::sync::Arc;

use portcullis::credentials::{CredentialId, CredentialView};
use portcullis::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};

use crate::message::parse;
use crate::verifier::PasswordVerifier;

/// The mechanism name.
pub const MECHANISM_NAME: &str = "PLAIN";

/// What the client is told for a wrong password or an unknown user (the same message for both).
pub const INVALID_CREDENTIALS: &str = "Authentication failed: Invalid username or password";

/// The message Kafka sends when the authzid differs from the user name (CVE-2017-12610).
const AUTHZID_MISMATCH: &str =
    "Authentication failed: Client requested an authorization id that is different from username";

/// The SASL/PLAIN server.
pub struct PlainServer {
    credentials: Arc<dyn CredentialView>,
    verifier: Arc<PasswordVerifier>,
}

impl PlainServer {
    /// A server checking passwords against `credentials`, with the default cache size.
    pub fn new(credentials: Arc<dyn CredentialView>) -> Self {
        Self::with_verifier(credentials, Arc::new(PasswordVerifier::default()))
    }

    /// A server with its own verifier (e.g. another cache size).
    pub fn with_verifier(
        credentials: Arc<dyn CredentialView>,
        verifier: Arc<PasswordVerifier>,
    ) -> Self {
        Self {
            credentials,
            verifier,
        }
    }

    /// The password verifier, for its counters.
    pub fn verifier(&self) -> &PasswordVerifier {
        &self.verifier
    }

    /// Starts an exchange with the concrete type (the trait method boxes it).
    pub fn start_exchange(&self, _context: &ExchangeContext) -> PlainServerExchange {
        PlainServerExchange {
            credentials: Arc::clone(&self.credentials),
            verifier: Arc::clone(&self.verifier),
            state: State::ExpectResponse,
            claimed_user: None,
        }
    }
}

impl std::fmt::Debug for PlainServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainServer")
            .field("verifier", &self.verifier)
            .finish_non_exhaustive()
    }
}

impl SaslMechanism for PlainServer {
    fn name(&self) -> &str {
        MECHANISM_NAME
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(self.start_exchange(context))
    }
}

/// One PLAIN exchange.
pub struct PlainServerExchange {
    credentials: Arc<dyn CredentialView>,
    verifier: Arc<PasswordVerifier>,
    state: State,
    /// The authcid of the client's message, once parsed (for per-user throttling of failures).
    claimed_user: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ExpectResponse,
    Finished,
}

impl SaslExchange for PlainServerExchange {
    fn step(&mut self, client_token: &[u8]) -> StepOutcome {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::ExpectResponse => match self.authenticate(client_token) {
                Ok(done) => StepOutcome::Complete(done),
                Err(failure) => StepOutcome::Fail(failure),
            },
            State::Finished => StepOutcome::Fail(AuthFailure::Hidden(
                "PLAIN exchange stepped after it finished".to_owned(),
            )),
        }
    }

    fn claimed_user(&self) -> Option<&str> {
        self.claimed_user.as_deref()
    }
}

impl PlainServerExchange {
    fn authenticate(&mut self, token: &[u8]) -> Result<Authenticated, AuthFailure> {
        // Every PLAIN failure is a SaslAuthenticationException in Kafka: the client sees it.
        let message = parse(token).map_err(|e| AuthFailure::Visible(e.to_string()))?;
        self.claimed_user = Some(message.username.to_owned());
        // Checked before the password, so a mismatched authzid costs no PBKDF2; the answer does
        // not depend on the credential either way.
        if !message.authzid.is_empty() && message.authzid != message.username {
            return Err(AuthFailure::Visible(AUTHZID_MISMATCH.to_owned()));
        }
        match self.verifier.verify_with(
            self.credentials.as_ref(),
            message.username,
            message.password,
        ) {
            Some(mechanism) => Ok(Authenticated::new(message.username)
                .with_credential(CredentialId::scram(message.username, mechanism))),
            None => Err(AuthFailure::Visible(INVALID_CREDENTIALS.to_owned())),
        }
    }
}

impl std::fmt::Debug for PlainServerExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainServerExchange")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}
