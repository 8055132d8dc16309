//! # portcullis-plugin-oauthbearer
//!
//! The built-in SASL/OAUTHBEARER server (RFC 7628, Kafka's `OAuthBearerSaslServer`) and the token
//! validators behind it:
//!
//! - [`jwks`]: signed JWTs checked against a JSON Web Key Set (Kafka's KIP-768 validator, plus
//!   required claims, required scopes and groups);
//! - [`introspection`]: opaque tokens asked about at an RFC 7662 endpoint, with bounded caches;
//! - [`unsecured`]: Kafka's development validator for unsigned tokens.
//!
//! Everything here is sans-I/O: time is passed in, the key set is handed over by the host (which
//! fetches and refreshes it), and the introspection validator calls the host's HTTP client through
//! the [`introspection::Introspect`] trait. The host chooses and builds the validator from its
//! `[oauthbearer]` configuration and hands it to [`OAuthBearerServer::new`].
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod claims;
pub mod framing;
pub mod introspection;
mod json;
pub mod jwks;
mod jws;
mod server;
#[cfg(test)]
mod test_keys;
pub mod unsecured;
mod validator;

pub use claims::ClaimRules;
pub use server::{OAuthBearerExchange, OAuthBearerServer, ServerSettings};
pub use validator::{Refusal, RefusalStatus, TokenValidator, ValidatedToken};

/// The mechanism name, as clients send it in SaslHandshake.
pub const MECHANISM_NAME: &str = "OAUTHBEARER";

/// The largest token accepted, in bytes. Real access tokens are a few KiB; the bound keeps a
/// hostile client from making us decode and parse megabytes before the signature check.
pub const MAX_TOKEN_LEN: usize = 64 * 1024;
