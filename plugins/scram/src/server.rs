//! The SCRAM server (RFC 5802 §3, §5) as a [`SaslMechanism`].
//!
//! Differences from Kafka's `ScramSaslServer`, all deliberate (kafka-security-semantics §3.3):
//! - unknown users, unknown or expired tokens and unusable credentials are answered with a
//!   deterministic fake salt and the default iteration count and fail at the proof, so the
//!   server-first message does not tell whether a user exists;
//! - the final nonce must equal the combined nonce exactly (not merely end with it);
//! - the AuthMessage is built from the raw client-first-message-bare;
//! - `c=` must decode to the gs2 header the client sent first.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use portcullis::credentials::{
    CredentialId, CredentialView, ScramCredential, ScramMechanism, TokenView,
};
use portcullis::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};
use portcullis::secret::constant_time_eq;

use crate::keys::{hash, hmac, xor};
use crate::messages::{parse_client_final, parse_client_first, ClientFinal, ClientFirst};
use crate::nonce::{fake_salt, random_bytes, NonceSource};

/// The message Kafka sends when the authzid differs from the user name (CVE-2017-12610).
pub const AUTHZID_MISMATCH: &str =
    "Authentication failed: Client requested an authorization id that is different from username";

/// The extension that turns the user name into a delegation-token id.
pub const TOKEN_AUTH_EXTENSION: &str = "tokenauth";

/// A SCRAM-SHA-256 or SCRAM-SHA-512 server.
pub struct ScramServer {
    mechanism: ScramMechanism,
    credentials: Arc<dyn CredentialView>,
    tokens: Arc<dyn TokenView>,
    nonces: NonceSource,
}

impl ScramServer {
    /// A server for `mechanism` reading user credentials and delegation tokens from these views.
    pub fn new(
        mechanism: ScramMechanism,
        credentials: Arc<dyn CredentialView>,
        tokens: Arc<dyn TokenView>,
    ) -> Self {
        Self {
            mechanism,
            credentials,
            tokens,
            nonces: NonceSource::Random,
        }
    }

    /// A server reading the host's credential and token views.
    pub fn from_host(mechanism: ScramMechanism, host: &portcullis::Host) -> Self {
        Self::new(mechanism, host.credentials(), host.tokens())
    }

    /// The hash variant this server runs.
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Replaces the random server nonce with a fixed one, to replay published test vectors.
    #[cfg(test)]
    pub(crate) fn with_fixed_nonce(mut self, nonce: &str) -> Self {
        self.nonces = NonceSource::Fixed(nonce.to_owned());
        self
    }

    /// Starts an exchange with the concrete type (the trait method boxes it).
    pub fn start_exchange(&self, context: &ExchangeContext) -> ScramServerExchange {
        ScramServerExchange {
            mechanism: self.mechanism,
            credentials: Arc::clone(&self.credentials),
            tokens: Arc::clone(&self.tokens),
            nonces: self.nonces.clone(),
            now_ms: context.now_ms,
            state: State::ExpectClientFirst,
            claimed_user: None,
        }
    }
}

impl std::fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

impl SaslMechanism for ScramServer {
    fn name(&self) -> &str {
        self.mechanism.mechanism_name()
    }

    /// A step is a lookup, a nonce and a few HMACs: microseconds (keys are derived when a
    /// credential is stored, never at login).
    fn steps_are_cheap(&self) -> bool {
        true
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(self.start_exchange(context))
    }
}

/// One server-side SCRAM exchange: client-first → server-first → client-final → server-final.
pub struct ScramServerExchange {
    mechanism: ScramMechanism,
    credentials: Arc<dyn CredentialView>,
    tokens: Arc<dyn TokenView>,
    nonces: NonceSource,
    now_ms: i64,
    state: State,
    /// The `n=` of client-first, once parsed (for per-user throttling of failures).
    claimed_user: Option<String>,
}

/// Where the exchange is. Each state holds only what is valid in it.
enum State {
    ExpectClientFirst,
    ExpectClientFinal(Box<AwaitingFinal>),
    Finished,
}

/// Everything the final step needs, fixed by the first step.
struct AwaitingFinal {
    /// The gs2 header as received; `c=` must decode to exactly this.
    gs2_header: String,
    /// `client-first-message-bare "," server-first-message ","`.
    auth_message_prefix: String,
    /// client nonce + server nonce.
    combined_nonce: String,
    verifier: Verifier,
    extensions: BTreeMap<String, String>,
}

/// What the proof is checked against.
enum Verifier {
    /// A usable credential of a user or token.
    Known {
        credential: ScramCredential,
        identity: Identity,
    },
    /// No usable credential: a decoy with random keys, so the final step does the same work and
    /// fails the same way as a wrong password. `reason` is only logged.
    Decoy {
        credential: ScramCredential,
        reason: &'static str,
    },
}

/// Who a successful exchange authenticates.
enum Identity {
    User(String),
    Token {
        id: String,
        owner: String,
        expiry_ms: i64,
    },
}

impl SaslExchange for ScramServerExchange {
    fn step(&mut self, client_token: &[u8]) -> StepOutcome {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::ExpectClientFirst => match self.on_client_first(client_token) {
                Ok((server_first, awaiting)) => {
                    self.state = State::ExpectClientFinal(Box::new(awaiting));
                    StepOutcome::Continue(server_first)
                }
                Err(failure) => StepOutcome::Fail(failure),
            },
            State::ExpectClientFinal(awaiting) => {
                match self.on_client_final(*awaiting, client_token) {
                    Ok(done) => StepOutcome::Complete(done),
                    Err(failure) => StepOutcome::Fail(failure),
                }
            }
            State::Finished => StepOutcome::Fail(AuthFailure::Hidden(
                "SCRAM exchange stepped after it finished".to_owned(),
            )),
        }
    }

    fn claimed_user(&self) -> Option<&str> {
        self.claimed_user.as_deref()
    }
}

impl ScramServerExchange {
    fn on_client_first(&mut self, token: &[u8]) -> Result<(Vec<u8>, AwaitingFinal), AuthFailure> {
        let first = parse_client_first(token).map_err(|e| {
            AuthFailure::Hidden(format!("Invalid SCRAM client first message format: {e}"))
        })?;
        self.claimed_user = Some(first.username.clone());
        // CVE-2017-12610: the client never chooses its identity. Checked before the lookup so the
        // answer does not depend on whether the user exists.
        if first
            .authzid
            .as_deref()
            .is_some_and(|authzid| authzid != first.username)
        {
            return Err(AuthFailure::Visible(AUTHZID_MISMATCH.to_owned()));
        }
        let verifier = self.lookup(&first);
        let credential = match &verifier {
            Verifier::Known { credential, .. } | Verifier::Decoy { credential, .. } => credential,
        };
        let combined_nonce = format!("{}{}", first.nonce, self.nonces.next());
        let server_first = format!(
            "r={combined_nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let ClientFirst {
            gs2_header,
            bare,
            extensions,
            ..
        } = first;
        let awaiting = AwaitingFinal {
            gs2_header,
            auth_message_prefix: format!("{bare},{server_first},"),
            combined_nonce,
            verifier,
            extensions: extensions.into_iter().collect(),
        };
        Ok((server_first.into_bytes(), awaiting))
    }

    /// Finds the credential to check the proof against; never fails, so that every client-first
    /// message that parses gets a server-first message of the same shape.
    fn lookup(&self, first: &ClientFirst) -> Verifier {
        let name = first.username.as_str();
        // `tokenauth=true` (Kafka's way), or — opted in, for clients that cannot send the
        // extension — a user name with the shape of a token id (no SCRAM user may have one then).
        let token_auth = first
            .extension(TOKEN_AUTH_EXTENSION)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || self.tokens.accepts_token_without_extension(name);
        if token_auth {
            match self.tokens.token(name, self.mechanism) {
                None => self.decoy(name, "Token Authentication failed: Invalid tokenId"),
                Some(token) if token.owner_name.is_empty() => {
                    self.decoy(name, "Token Authentication failed: Invalid tokenId")
                }
                Some(token) if token.expiry_ms <= self.now_ms => {
                    self.decoy(name, "Token Authentication failed: token expired")
                }
                Some(token) => self.usable(
                    name,
                    token.credential,
                    Identity::Token {
                        id: name.to_owned(),
                        owner: token.owner_name,
                        expiry_ms: token.expiry_ms,
                    },
                ),
            }
        } else {
            match self.credentials.scram(name, self.mechanism) {
                None => self.decoy(name, "Authentication failed: Invalid user credentials"),
                Some(credential) => self.usable(name, credential, Identity::User(name.to_owned())),
            }
        }
    }

    fn usable(&self, name: &str, credential: ScramCredential, identity: Identity) -> Verifier {
        let digest_len = self.mechanism.digest_len();
        if credential.iterations < ScramMechanism::MIN_ITERATIONS {
            // Kafka refuses these at the first step; answering with a decoy instead keeps a weak
            // credential from being detectable, and it still never authenticates.
            return self.decoy(
                name,
                "Stored iteration count is below the mechanism minimum",
            );
        }
        if credential.stored_key.len() != digest_len || credential.server_key.len() != digest_len {
            return self.decoy(name, "Stored credential has keys of the wrong length");
        }
        Verifier::Known {
            credential,
            identity,
        }
    }

    fn decoy(&self, name: &str, reason: &'static str) -> Verifier {
        let digest_len = self.mechanism.digest_len();
        Verifier::Decoy {
            credential: ScramCredential {
                salt: fake_salt(self.mechanism, name),
                stored_key: random_bytes(digest_len),
                server_key: random_bytes(digest_len),
                iterations: ScramMechanism::MIN_ITERATIONS,
            },
            reason,
        }
    }

    fn on_client_final(
        &self,
        awaiting: AwaitingFinal,
        token: &[u8],
    ) -> Result<Authenticated, AuthFailure> {
        let last: ClientFinal = parse_client_final(token).map_err(|e| {
            AuthFailure::Hidden(format!("Invalid SCRAM client final message format: {e}"))
        })?;
        if !constant_time_eq(&last.channel_binding, awaiting.gs2_header.as_bytes()) {
            return Err(AuthFailure::Hidden(
                "Channel binding in the final client message does not match the gs2 header"
                    .to_owned(),
            ));
        }
        // RFC 5802 §5.1: the nonce must be the combined nonce, exactly (CVE-2024-56128).
        if !constant_time_eq(last.nonce.as_bytes(), awaiting.combined_nonce.as_bytes()) {
            return Err(AuthFailure::Hidden(
                "Invalid client nonce in the final client message".to_owned(),
            ));
        }
        if last.proof.len() != self.mechanism.digest_len() {
            return Err(AuthFailure::Hidden(
                "Client proof has the wrong length".to_owned(),
            ));
        }
        let auth_message = format!("{}{}", awaiting.auth_message_prefix, last.without_proof);
        let credential = match &awaiting.verifier {
            Verifier::Known { credential, .. } | Verifier::Decoy { credential, .. } => credential,
        };
        // ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); the proof is right when
        // H(ClientKey) is the stored key. Decoys run the same computation.
        let client_signature = hmac(
            self.mechanism,
            &credential.stored_key,
            &[auth_message.as_bytes()],
        );
        let client_key = xor(&client_signature, &last.proof);
        let proof_matches =
            constant_time_eq(&hash(self.mechanism, &client_key), &credential.stored_key);
        let server_signature = hmac(
            self.mechanism,
            &credential.server_key,
            &[auth_message.as_bytes()],
        );
        match awaiting.verifier {
            Verifier::Decoy { reason, .. } => Err(AuthFailure::Hidden(reason.to_owned())),
            Verifier::Known { .. } if !proof_matches => Err(AuthFailure::Hidden(
                "Authentication failed: Invalid client credentials".to_owned(),
            )),
            Verifier::Known { identity, .. } => {
                let server_final = format!("v={}", B64.encode(server_signature)).into_bytes();
                let done = match identity {
                    Identity::User(name) => {
                        let credential = CredentialId::scram(name.clone(), self.mechanism);
                        Authenticated::new(name).with_credential(credential)
                    }
                    Identity::Token {
                        id,
                        owner,
                        expiry_ms,
                    } => Authenticated::new(owner)
                        .with_credential(CredentialId::token(id.clone()))
                        .with_token_id(Some(id))
                        .with_credential_expiry_ms(Some(expiry_ms)),
                };
                Ok(done
                    .with_server_final(server_final)
                    .with_extensions(awaiting.extensions))
            }
        }
    }
}

impl std::fmt::Debug for ScramServerExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::ExpectClientFirst => "ExpectClientFirst",
            State::ExpectClientFinal(_) => "ExpectClientFinal",
            State::Finished => "Finished",
        };
        f.debug_struct("ScramServerExchange")
            .field("mechanism", &self.mechanism)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
