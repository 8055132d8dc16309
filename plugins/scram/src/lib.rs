//! # portcullis-plugin-scram
//!
//! The built-in SCRAM-SHA-256 and SCRAM-SHA-512 mechanisms (RFC 5802, RFC 7677), written here on
//! the RustCrypto primitives rather than taken from rsasl (whose SCRAM server rebuilds the
//! AuthMessage, which breaks Kafka's `tokenauth` extension, and panics on short input).
//!
//! - [`ScramServer`]: the server, registered with the host as `SCRAM-SHA-256` and `SCRAM-SHA-512`.
//! - [`ScramClient`]: the client, for upstream logins, tests and load tools.
//! - [`derive_credential`], [`credential_from_salted_password`], [`random_salt`]: credential
//!   derivation for the credential APIs.
//! - [`ScramTokenCrypto`]: what the framework's token manager needs from SCRAM — a delegation
//!   token's credentials, derived from its Base64 HMAC with a salt of this node's own.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Arc;

use portcullis::credentials::ScramMechanism;
use portcullis::plugin_api::{parse_config, NoConfig};
use portcullis::registry::{check_config, MechanismFactory};
use portcullis::sasl::SaslMechanism;
use portcullis::{Host, PluginError};

mod client;
mod keys;
pub mod messages;
mod nonce;
mod server;
mod tokens;

pub use client::{SaltedPasswordCache, ScramClient, CLIENT_MAX_ITERATIONS};
pub use keys::{
    credential_from_salted_password, derive_credential, keyed_sha256, random_salt, salted_password,
    SALT_LEN,
};
pub use server::{ScramServer, ScramServerExchange, AUTHZID_MISMATCH, TOKEN_AUTH_EXTENSION};
pub use tokens::ScramTokenCrypto;

fn build_sha256(config: &str, host: &Host) -> Result<Arc<dyn SaslMechanism>, PluginError> {
    parse_config::<NoConfig>(config)?;
    Ok(Arc::new(ScramServer::from_host(
        ScramMechanism::Sha256,
        host,
    )))
}

fn build_sha512(config: &str, host: &Host) -> Result<Arc<dyn SaslMechanism>, PluginError> {
    parse_config::<NoConfig>(config)?;
    Ok(Arc::new(ScramServer::from_host(
        ScramMechanism::Sha512,
        host,
    )))
}

inventory::submit! {
    MechanismFactory {
        name: "SCRAM-SHA-256",
        build: build_sha256,
        check_config: check_config::<NoConfig>,
    }
}

inventory::submit! {
    MechanismFactory {
        name: "SCRAM-SHA-512",
        build: build_sha512,
        check_config: check_config::<NoConfig>,
    }
}
