//! Delegation tokens (KIP-48, KIP-373): the token manager, a core service of the framework.
//!
//! - [`TokenManager`] takes Kafka's decisions for create, renew, expire and the expiry sweep, on
//!   the node's view of the metadata log, and implements [`TokenView`](crate::credentials::TokenView)
//!   for the SCRAM mechanisms (`tokenauth=true`).
//! - Tokens are records of the log ([`crate::store::MetadataRecord::DelegationToken`], removed by
//!   a tombstone); every node applies them ([`TokenManager::apply`]) and recomputes each token's
//!   HMAC from the shared secret, which is never written down.
//! - Sans-I/O: time is passed in, randomness and SCRAM key derivation come from the host
//!   ([`TokenCrypto`]), and the sweep is driven with [`TokenManager::poll_timeout`] and
//!   [`TokenManager::on_timeout`].
//! - The four APIs are served by [`crate::local::delegation_tokens`].

pub mod id;
mod manager;
mod table;

pub use manager::{
    CreateRequest, ExpiryChange, NewToken, TokenConfig, TokenCrypto, TokenManager,
    DEFAULT_EXPIRY_CHECK_INTERVAL_MS, DEFAULT_EXPIRY_TIME_MS, DEFAULT_MAX_LIFETIME_MS,
    TOKEN_SCRAM_ITERATIONS,
};
pub use table::TokenInfo;

#[cfg(test)]
mod tests;
