//! The byte encodings of the values that cross the ABI as one buffer (lists, maps, ACLs, events,
//! errors): little-endian integers, and strings and byte strings prefixed by a `u32` length.
//! Length-prefixed rather than separator-based, so any string survives; both directions live here
//! so that the two sides cannot disagree. Decoding never trusts a length: a buffer that runs out
//! is [`CodecError::Truncated`], never a panic.
//!
//! One file per family of values; everything is re-exported here, so each is
//! `portcullis_plugin_api::abi::codec::<name>`.

mod acls;
mod credentials;
mod errors;
mod events;
mod maps;
mod wire;

pub use acls::*;
pub use credentials::*;
pub use errors::*;
pub use events::*;
pub use maps::*;
pub use wire::*;

#[cfg(test)]
mod tests;
