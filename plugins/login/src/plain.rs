//! PLAIN login: one message, `NUL username NUL password`.

use portcullis::login::{
    ClientExchange, ExpiringCredential, LoginError, LoginModule, SaslClientExchange,
};
use portcullis::secret::Secret;

pub(crate) const MECHANISM_NAME: &str = "PLAIN";

/// Logs in with SASL/PLAIN (send it over TLS only: the password travels in the clear).
#[derive(Clone, Debug)]
pub struct PlainLogin {
    username: String,
    password: Secret,
}

impl PlainLogin {
    /// A login as `username` with `password`.
    pub fn new(username: impl Into<String>, password: Secret) -> Self {
        Self {
            username: username.into(),
            password,
        }
    }
}

impl LoginModule for PlainLogin {
    fn mechanism(&self) -> &str {
        MECHANISM_NAME
    }

    fn credential(&self) -> ExpiringCredential {
        ExpiringCredential::non_expiring(self.username.clone())
    }

    fn start(&self) -> Result<ClientExchange, LoginError> {
        Ok(ClientExchange::Custom(Box::new(PlainClientExchange::new(
            self.username.clone(),
            self.password.clone(),
        ))))
    }
}

/// The client half of one PLAIN exchange.
#[derive(Debug)]
pub struct PlainClientExchange {
    username: String,
    password: Secret,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    /// The message is sent; the server answers with an empty token on success.
    Sent,
    Complete,
    Failed,
}

impl PlainClientExchange {
    /// The client half of one PLAIN exchange as `username` with `password`.
    pub fn new(username: impl Into<String>, password: Secret) -> Self {
        Self {
            username: username.into(),
            password,
            state: State::Start,
        }
    }
}

impl SaslClientExchange for PlainClientExchange {
    fn initial(&mut self) -> Result<Vec<u8>, LoginError> {
        if self.state != State::Start {
            return Err(LoginError("PLAIN exchange already started".to_owned()));
        }
        let password = self.password.expose();
        // A NUL inside a field would shift the server's token split; empty fields are refused
        // by every PLAIN server.
        if self.username.is_empty() || self.username.contains('\0') {
            self.state = State::Failed;
            return Err(LoginError(
                "PLAIN user name must be non-empty and contain no NUL".to_owned(),
            ));
        }
        if password.is_empty() || password.contains('\0') {
            self.state = State::Failed;
            return Err(LoginError(
                "PLAIN password must be non-empty and contain no NUL".to_owned(),
            ));
        }
        let mut message = Vec::with_capacity(2 + self.username.len() + password.len());
        message.push(0);
        message.extend_from_slice(self.username.as_bytes());
        message.push(0);
        message.extend_from_slice(password.as_bytes());
        self.state = State::Sent;
        Ok(message)
    }

    fn step(&mut self, server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError> {
        match self.state {
            State::Sent if server_token.is_empty() => {
                self.state = State::Complete;
                Ok(None)
            }
            State::Sent => {
                self.state = State::Failed;
                Err(LoginError("PLAIN server sent a non-empty token".to_owned()))
            }
            State::Start => Err(LoginError(
                "PLAIN exchange stepped before the initial message".to_owned(),
            )),
            State::Complete | State::Failed => {
                Err(LoginError("PLAIN exchange already finished".to_owned()))
            }
        }
    }

    fn is_complete(&self) -> bool {
        self.state == State::Complete
    }
}
