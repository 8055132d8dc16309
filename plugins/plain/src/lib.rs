//! # portcullis-plugin-plain
//!
//! The built-in SASL/PLAIN server (RFC 4616, Kafka's `PlainSaslServer`). Passwords are checked
//! against the user's SCRAM credential, so one `AlterUserScramCredentials` call provisions a user
//! for PLAIN and SCRAM alike, and no password is ever stored. Deriving the key costs a PBKDF2 per
//! login, so successful derivations are remembered in a bounded cache ([`verifier`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Arc;

use portcullis::registry::{MechanismFactory, Services};
use portcullis::sasl::SaslMechanism;

mod cache;
pub mod message;
mod server;
pub mod verifier;

pub use server::{PlainServer, PlainServerExchange, INVALID_CREDENTIALS, MECHANISM_NAME};
pub use verifier::{PasswordVerifier, DEFAULT_CACHE_CAPACITY};

fn build(services: &Services) -> Arc<dyn SaslMechanism> {
    Arc::new(PlainServer::new(Arc::clone(&services.credentials)))
}

inventory::submit! {
    MechanismFactory { name: MECHANISM_NAME, build }
}
