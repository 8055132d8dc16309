//! # Portcullis framework
//!
//! The core services and the Kafka security layer of Portcullis, and (re-exported from
//! [`portcullis_plugin_api`], module by module under the same names) the plugin API, written
//! **sans-I/O**: nothing here opens a socket, reads a file or looks at a clock. The host feeds
//! decoded frames and the current time in, and gets back what to do.
//!
//! | you want to…                                  | look at                                  |
//! |-----------------------------------------------|------------------------------------------|
//! | write a plugin (any kind)                     | the plugin API, [`plugin_api`]           |
//! | write a SASL mechanism                        | [`sasl::SaslMechanism`]                  |
//! | map an authenticated identity to a principal  | [`principal::PrincipalBuilder`]          |
//! | decide where a request goes                   | [`forwarding::ForwardingPolicy`]         |
//! | persist security metadata                     | [`store::MetadataStore`]                 |
//! | authenticate Portcullis to an upstream broker | [`login::LoginModule`]                   |
//! | decide what a principal may do                | [`authorizer::Authorizer`]               |
//! | observe what happens                          | [`events::EventBus`], [`events::EventSubscriber`] |
//! | register a built-in plugin of any kind        | [`registry`]                             |
//! | load dynamic plugins (host authors)           | [`abi`]                                  |
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
pub mod telemetry;
pub mod throttle;
pub mod tokens;

pub use portcullis_plugin_api as plugin_api;
pub use portcullis_plugin_api::{
    api_keys, host, plugin, Host, HostServices, Level, MetricKind, Plugin, PluginError, PluginKind,
};

/// The framework's version.
pub const FRAMEWORK_VERSION: &str = env!("CARGO_PKG_VERSION");
