//! # portcullis-plugin-plain
//!
//! The built-in SASL/PLAIN server (RFC 4616, Kafka's `PlainSaslServer`). Passwords are checked
//! against the user's SCRAM credential, so one `AlterUserScramCredentials` call provisions a user
//! for PLAIN and SCRAM alike, and no password is ever stored. Deriving the key costs a PBKDF2 per
//! login, so successful derivations are remembered in a bounded cache ([`verifier`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Arc;

use portcullis::plugin_api::{parse_config, NoConfig};
use portcullis::registry::{check_config, MechanismFactory};
use portcullis::sasl::SaslMechanism;
use portcullis::{Host, PluginError};

mod cache;
pub mod message;
mod server;
pub mod verifier;

pub use server::{PlainServer, PlainServerExchange, INVALID_CREDENTIALS, MECHANISM_NAME};
pub use verifier::{PasswordVerifier, DEFAULT_CACHE_CAPACITY};

fn build(config: &str, host: &Host) -> Result<Arc<dyn SaslMechanism>, PluginError> {
    parse_config::<NoConfig>(config)?;
    Ok(Arc::new(PlainServer::new(host.credentials())))
}

inventory::submit! {
    MechanismFactory {
        name: MECHANISM_NAME,
        build,
        check_config: check_config::<NoConfig>,
    }
}
