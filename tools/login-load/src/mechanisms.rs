//! The client side of the SASL mechanisms the tool speaks.

use std::sync::Arc;

use portcullis::login::{LoginError, SaslClientExchange};
use portcullis::secret::Secret;
use portcullis_plugin_scram::{SaltedPasswordCache, ScramClient};

use crate::args::Mechanism;

/// PLAIN (RFC 4616) without an authorization id: one message, and the server's answer is empty.
pub struct PlainClient {
    user: String,
    password: Secret,
    state: PlainState,
}

enum PlainState {
    Start,
    Sent,
    Complete,
    Failed,
}

impl SaslClientExchange for PlainClient {
    fn initial(&mut self) -> Result<Vec<u8>, LoginError> {
        if !matches!(self.state, PlainState::Start) {
            self.state = PlainState::Failed;
            return Err(LoginError("PLAIN exchange already started".to_owned()));
        }
        let mut token = Vec::with_capacity(2 + self.user.len() + self.password.expose().len());
        token.push(0);
        token.extend_from_slice(self.user.as_bytes());
        token.push(0);
        token.extend_from_slice(self.password.expose().as_bytes());
        self.state = PlainState::Sent;
        Ok(token)
    }

    fn step(&mut self, _server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError> {
        match self.state {
            // Success is the error code of the SaslAuthenticate response, checked by the caller;
            // PLAIN's server message carries nothing.
            PlainState::Sent => {
                self.state = PlainState::Complete;
                Ok(None)
            }
            _ => {
                self.state = PlainState::Failed;
                Err(LoginError("PLAIN exchange stepped out of order".to_owned()))
            }
        }
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, PlainState::Complete)
    }
}

/// What every login of one run shares: credentials and the SCRAM salted-password cache.
pub struct ClientFactory {
    mechanism: Mechanism,
    user: String,
    password: Secret,
    cache: Arc<SaltedPasswordCache>,
}

impl ClientFactory {
    pub fn new(mechanism: Mechanism, user: String, password: Secret) -> Self {
        Self {
            mechanism,
            user,
            password,
            cache: Arc::new(SaltedPasswordCache::new()),
        }
    }

    pub fn mechanism_name(&self) -> &'static str {
        self.mechanism.name()
    }

    /// A fresh client exchange for one login.
    pub fn start(&self) -> Box<dyn SaslClientExchange> {
        match self.mechanism {
            Mechanism::Scram(m) => Box::new(
                ScramClient::new(m, self.user.clone(), self.password.clone())
                    .with_cache(Arc::clone(&self.cache)),
            ),
            Mechanism::Plain => Box::new(PlainClient {
                user: self.user.clone(),
                password: self.password.clone(),
                state: PlainState::Start,
            }),
        }
    }
}
