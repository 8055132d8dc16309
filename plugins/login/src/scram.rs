//! SCRAM login, for user passwords and for delegation tokens (`tokenauth=true`).

use std::sync::Arc;

use portcullis::credentials::ScramMechanism;
use portcullis::login::{ClientExchange, ExpiringCredential, LoginError, LoginModule};
use portcullis::secret::Secret;
use portcullis_plugin_scram::{SaltedPasswordCache, ScramClient, TOKEN_AUTH_EXTENSION};

/// Logs in with SCRAM-SHA-256 or SCRAM-SHA-512 and verifies the server's signature.
///
/// Every exchange the module starts shares one salted-password cache, so re-authentications and
/// further upstream connections skip PBKDF2 while the server's salt and iteration count stay the
/// same.
#[derive(Clone, Debug)]
pub struct ScramLogin {
    mechanism: ScramMechanism,
    username: String,
    password: Secret,
    extensions: Vec<(String, String)>,
    cache: Arc<SaltedPasswordCache>,
}

impl ScramLogin {
    /// A login as `username` with `password`.
    pub fn new(mechanism: ScramMechanism, username: impl Into<String>, password: Secret) -> Self {
        Self {
            mechanism,
            username: username.into(),
            password,
            extensions: Vec::new(),
            cache: Arc::new(SaltedPasswordCache::new()),
        }
    }

    /// A login with a delegation token: the user name is the token id, the password the token's
    /// base64 HMAC, and `tokenauth=true` is sent (like Kafka's `ScramLoginModule`).
    pub fn delegation_token(
        mechanism: ScramMechanism,
        token_id: impl Into<String>,
        token_hmac: Secret,
    ) -> Self {
        Self::new(mechanism, token_id, token_hmac)
            .with_extensions(vec![(TOKEN_AUTH_EXTENSION.to_owned(), "true".to_owned())])
    }

    /// Sends these SCRAM extensions in client-first, in this order.
    pub fn with_extensions(mut self, extensions: Vec<(String, String)>) -> Self {
        self.extensions = extensions;
        self
    }

    /// The SCRAM variant.
    pub fn scram_mechanism(&self) -> ScramMechanism {
        self.mechanism
    }
}

impl LoginModule for ScramLogin {
    fn mechanism(&self) -> &str {
        self.mechanism.mechanism_name()
    }

    /// The user name (for a token login, the token id: the owner is known only to the server).
    fn credential(&self) -> ExpiringCredential {
        ExpiringCredential::non_expiring(self.username.clone())
    }

    fn start(&self) -> Result<ClientExchange, LoginError> {
        Ok(ClientExchange::Custom(Box::new(
            ScramClient::new(self.mechanism, self.username.clone(), self.password.clone())
                .with_extensions(self.extensions.clone())
                .with_cache(Arc::clone(&self.cache)),
        )))
    }
}
