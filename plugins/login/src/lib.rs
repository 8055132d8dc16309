//! # portcullis-plugin-login
//!
//! Login modules for Portcullis' own connections to the upstream cluster (Kafka's
//! `PlainLoginModule` and `ScramLoginModule`): [`PlainLogin`], [`ScramLogin`], and
//! [`login_module`] to pick one by mechanism name.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Arc;

use portcullis::credentials::ScramMechanism;
use portcullis::login::LoginModule;
use portcullis::secret::Secret;

mod plain;
mod scram;

pub use plain::{PlainClientExchange, PlainLogin};
pub use scram::ScramLogin;

/// No built-in login module exists for the mechanism.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no built-in login module for SASL mechanism '{0}' (supported: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")]
pub struct UnsupportedLoginMechanism(pub String);

/// The login module for `mechanism` with a user name and password.
pub fn login_module(
    mechanism: &str,
    username: impl Into<String>,
    password: Secret,
) -> Result<Arc<dyn LoginModule>, UnsupportedLoginMechanism> {
    if mechanism == plain::MECHANISM_NAME {
        return Ok(Arc::new(PlainLogin::new(username, password)));
    }
    match ScramMechanism::from_mechanism_name(mechanism) {
        Some(scram) => Ok(Arc::new(ScramLogin::new(scram, username, password))),
        None => Err(UnsupportedLoginMechanism(mechanism.to_owned())),
    }
}
