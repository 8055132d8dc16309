//! The SCRAM client (RFC 5802 §3), used to log in upstream and by tests, benchmarks and load
//! tools. It verifies the server's signature before it reports the exchange complete.

use std::sync::{Arc, Mutex, PoisonError};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use portcullis::credentials::ScramMechanism;
use portcullis::login::{LoginError, SaslClientExchange};
use portcullis::secret::{constant_time_eq, Secret};
use rand::RngCore;

use crate::keys::{client_key, hash, hmac, keyed_sha256, salted_password, server_key, xor};
use crate::messages::{
    check_extension, escape_saslname, parse_server_final, parse_server_first, ServerFinal,
};
use crate::nonce::NonceSource;

/// The highest iteration count the client accepts from a server. A hostile server could
/// otherwise make the client spin through billions of PBKDF2 rounds.
pub const CLIENT_MAX_ITERATIONS: u32 = 100_000;

/// The longest `e=` value kept in an error message.
const MAX_SERVER_ERROR_LEN: usize = 128;

/// Remembers the salted password of the last exchange, so that repeated logins with the same
/// password against the same salt skip PBKDF2 (one upstream connection per client connection
/// would otherwise cost one PBKDF2 each).
///
/// The entry is tagged with a keyed hash of the password, so a cache shared by mistake between
/// two passwords misses instead of answering with the wrong key.
#[derive(Default)]
pub struct SaltedPasswordCache {
    entry: Mutex<Option<CachedSalt>>,
}

struct CachedSalt {
    mechanism: ScramMechanism,
    password_tag: [u8; 32],
    salt: Vec<u8>,
    iterations: u32,
    salted: Vec<u8>,
}

impl SaltedPasswordCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn get(
        &self,
        mechanism: ScramMechanism,
        password_tag: &[u8; 32],
        salt: &[u8],
        iterations: u32,
    ) -> Option<Vec<u8>> {
        let entry = self.entry.lock().unwrap_or_else(PoisonError::into_inner);
        entry
            .as_ref()
            .filter(|e| {
                e.mechanism == mechanism
                    && e.iterations == iterations
                    && e.salt == salt
                    && constant_time_eq(&e.password_tag, password_tag)
            })
            .map(|e| e.salted.clone())
    }

    fn put(&self, entry: CachedSalt) {
        *self.entry.lock().unwrap_or_else(PoisonError::into_inner) = Some(entry);
    }
}

impl std::fmt::Debug for SaltedPasswordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaltedPasswordCache")
            .finish_non_exhaustive()
    }
}

/// The client half of one SCRAM exchange.
pub struct ScramClient {
    mechanism: ScramMechanism,
    username: String,
    password: Secret,
    extensions: Vec<(String, String)>,
    cache: Option<Arc<SaltedPasswordCache>>,
    nonces: NonceSource,
    state: ClientState,
}

enum ClientState {
    Start,
    AwaitServerFirst {
        gs2_header: String,
        client_first_bare: String,
        client_nonce: String,
    },
    AwaitServerFinal {
        server_signature: Vec<u8>,
    },
    Complete,
    Failed,
}

impl ScramClient {
    /// A client for `username` with `password` (UTF-8, no SASLprep, like Kafka).
    pub fn new(mechanism: ScramMechanism, username: impl Into<String>, password: Secret) -> Self {
        Self {
            mechanism,
            username: username.into(),
            password,
            extensions: Vec::new(),
            cache: None,
            nonces: NonceSource::Random,
            state: ClientState::Start,
        }
    }

    /// Sends these extensions in client-first, in this order (e.g. `tokenauth=true`).
    pub fn with_extensions(mut self, extensions: Vec<(String, String)>) -> Self {
        self.extensions = extensions;
        self
    }

    /// Shares a salted-password cache between exchanges of the same user and password.
    pub fn with_cache(mut self, cache: Arc<SaltedPasswordCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Uses a fixed client nonce, to replay published test vectors.
    #[cfg(test)]
    pub(crate) fn with_fixed_nonce(mut self, nonce: &str) -> Self {
        self.nonces = NonceSource::Fixed(nonce.to_owned());
        self
    }

    fn client_first(&mut self) -> Result<Vec<u8>, LoginError> {
        let name = escape_saslname(&self.username)
            .map_err(|_| LoginError("SCRAM user name must be non-empty ASCII".to_owned()))?;
        let client_nonce = self.nonces.next();
        let mut bare = format!("n={name},r={client_nonce}");
        for (key, value) in &self.extensions {
            check_extension(key, value)
                .map_err(|_| LoginError(format!("invalid SCRAM extension '{key}'")))?;
            bare.push_str(&format!(",{key}={value}"));
        }
        let gs2_header = "n,,".to_owned();
        let message = format!("{gs2_header}{bare}").into_bytes();
        self.state = ClientState::AwaitServerFirst {
            gs2_header,
            client_first_bare: bare,
            client_nonce,
        };
        Ok(message)
    }

    fn client_final(
        &mut self,
        server_first_raw: &[u8],
        gs2_header: &str,
        client_first_bare: &str,
        client_nonce: &str,
    ) -> Result<Vec<u8>, LoginError> {
        let server_first = parse_server_first(server_first_raw)
            .map_err(|e| LoginError(format!("invalid SCRAM server first message: {e}")))?;
        if server_first.nonce.len() <= client_nonce.len()
            || !server_first.nonce.starts_with(client_nonce)
        {
            return Err(LoginError(
                "SCRAM server nonce does not extend the client nonce".to_owned(),
            ));
        }
        if server_first.iterations < ScramMechanism::MIN_ITERATIONS
            || server_first.iterations > CLIENT_MAX_ITERATIONS
        {
            return Err(LoginError(format!(
                "SCRAM server asked for {} iterations, outside {}..={}",
                server_first.iterations,
                ScramMechanism::MIN_ITERATIONS,
                CLIENT_MAX_ITERATIONS
            )));
        }
        let salted = self.salted_password(&server_first.salt, server_first.iterations);
        // The parser accepted the message as ASCII, so this conversion cannot lose anything.
        let server_first_text = String::from_utf8_lossy(server_first_raw);
        let without_proof = format!(
            "c={},r={}",
            B64.encode(gs2_header.as_bytes()),
            server_first.nonce
        );
        let auth_message = format!("{client_first_bare},{server_first_text},{without_proof}");
        let client_key = client_key(self.mechanism, &salted);
        let stored_key = hash(self.mechanism, &client_key);
        let client_signature = hmac(self.mechanism, &stored_key, &[auth_message.as_bytes()]);
        let proof = xor(&client_key, &client_signature);
        let server_signature = hmac(
            self.mechanism,
            &server_key(self.mechanism, &salted),
            &[auth_message.as_bytes()],
        );
        self.state = ClientState::AwaitServerFinal { server_signature };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    fn salted_password(&self, salt: &[u8], iterations: u32) -> Vec<u8> {
        let password = self.password.expose().as_bytes();
        let Some(cache) = &self.cache else {
            return salted_password(self.mechanism, password, salt, iterations);
        };
        let tag = password_tag(password);
        if let Some(salted) = cache.get(self.mechanism, &tag, salt, iterations) {
            return salted;
        }
        let salted = salted_password(self.mechanism, password, salt, iterations);
        cache.put(CachedSalt {
            mechanism: self.mechanism,
            password_tag: tag,
            salt: salt.to_vec(),
            iterations,
            salted: salted.clone(),
        });
        salted
    }

    fn verify_server_final(&self, server_final: &[u8], expected: &[u8]) -> Result<(), LoginError> {
        match parse_server_final(server_final)
            .map_err(|e| LoginError(format!("invalid SCRAM server final message: {e}")))?
        {
            ServerFinal::Verifier(signature) if constant_time_eq(&signature, expected) => Ok(()),
            ServerFinal::Verifier(_) => Err(LoginError(
                "SCRAM server signature does not verify".to_owned(),
            )),
            ServerFinal::Error(error) => Err(LoginError(format!(
                "SCRAM server error: {}",
                error.chars().take(MAX_SERVER_ERROR_LEN).collect::<String>()
            ))),
        }
    }
}

/// A keyed hash of the password, to recognise it in the cache without storing it.
fn password_tag(password: &[u8]) -> [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        key
    });
    keyed_sha256(key, &[password])
}

impl SaslClientExchange for ScramClient {
    fn initial(&mut self) -> Result<Vec<u8>, LoginError> {
        match self.state {
            ClientState::Start => self.client_first().inspect_err(|_| {
                self.state = ClientState::Failed;
            }),
            _ => Err(LoginError("SCRAM exchange already started".to_owned())),
        }
    }

    fn step(&mut self, server_token: &[u8]) -> Result<Option<Vec<u8>>, LoginError> {
        match std::mem::replace(&mut self.state, ClientState::Failed) {
            ClientState::AwaitServerFirst {
                gs2_header,
                client_first_bare,
                client_nonce,
            } => self
                .client_final(server_token, &gs2_header, &client_first_bare, &client_nonce)
                .map(Some),
            ClientState::AwaitServerFinal { server_signature } => {
                self.verify_server_final(server_token, &server_signature)?;
                self.state = ClientState::Complete;
                Ok(None)
            }
            ClientState::Start => Err(LoginError(
                "SCRAM exchange stepped before the initial message".to_owned(),
            )),
            ClientState::Complete => {
                self.state = ClientState::Complete;
                Err(LoginError("SCRAM exchange already complete".to_owned()))
            }
            ClientState::Failed => Err(LoginError("SCRAM exchange already failed".to_owned())),
        }
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, ClientState::Complete)
    }
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}
