//! # Portcullis framework
//!
//! The plugin API, the core services and the Kafka security layer of Portcullis, written
//! **sans-I/O**: nothing here opens a socket, reads a file or looks at a clock. The host feeds
//! decoded frames and the current time in, and gets back what to do.
//!
//! | you want to…                                  | look at                                  |
//! |-----------------------------------------------|------------------------------------------|
//! | write a SASL mechanism                        | [`sasl::SaslMechanism`], [`export_sasl_mechanism!`] |
//! | map an authenticated identity to a principal  | [`principal::PrincipalBuilder`]          |
//! | decide where a request goes                   | [`forwarding::ForwardingPolicy`]         |
//! | persist security metadata                     | [`store::MetadataStore`]                 |
//! | authenticate Portcullis to an upstream broker | [`login::LoginModule`]                   |
//! | observe what happens                          | [`events::EventBus`]                     |
//! | drive a client connection (host authors)      | [`connection::Connection`]               |
#![deny(missing_docs)]

pub mod abi;
pub mod acl;
pub mod audit;
pub mod authorization;
pub mod authorizer;
pub mod connection;
pub mod credentials;
pub mod envelope;
pub mod errors;
pub mod events;
pub mod forwarding;
pub mod local;
pub mod login;
pub mod metrics;
pub mod principal;
pub mod protocol;
pub mod reauth;
pub mod refresh;
pub mod registry;
pub mod sasl;
pub mod secret;
pub mod store;
pub mod throttle;
pub mod tokens;

/// The framework's version, written into every dynamic plugin's declaration.
pub const FRAMEWORK_VERSION: &str = env!("CARGO_PKG_VERSION");
