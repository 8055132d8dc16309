//! # Portcullis plugin API
//!
//! What a Portcullis plugin author depends on, and nothing else: the plugin traits, the value
//! types they use, the host services, and the C ABI with the export macros that turn a `cdylib`
//! into a plugin the gateway loads from its plugin directory. No Kafka protocol code and no
//! authorization layer are in here; the gateway's framework (`portcullis`) re-exports all of it,
//! so built-in plugins and the host use the very same types.
//!
//! | a plugin that…                                   | implements                                  | export with |
//! |--------------------------------------------------|---------------------------------------------|-------------|
//! | authenticates clients with a SASL mechanism      | [`sasl::SaslMechanism`]                     | `sasl_mechanism` |
//! | decides what a principal may do                  | [`authorizer::Authorizer`]                  | `authorizer` |
//! | maps an authentication (SASL, TLS) to a principal| [`principal::PrincipalBuilder`]             | `principal_builder` |
//! | authenticates Portcullis to the upstream cluster | [`login::LoginModule`]                      | `login_module` |
//! | routes or refuses requests                       | [`forwarding::ForwardingPolicy`]            | `forwarding_policy` |
//! | observes authentications, ACL and token changes  | [`events::EventSubscriber`]                 | `event_subscriber` |
//!
//! Every plugin also implements [`Plugin`]: its name, its typed configuration and its
//! constructor, which receives the [`Host`] services. One library may export several plugins of
//! any kinds with one call of [`export_plugins!`]; see `docs/plugins.md` for a guide per kind.
#![deny(missing_docs)]

pub mod abi;
pub mod acl;
pub mod api_keys;
pub mod authorizer;
pub mod credentials;
pub mod errors;
pub mod events;
pub mod forwarding;
pub mod host;
pub mod login;
pub mod plugin;
pub mod principal;
pub mod sasl;
pub mod secret;

pub use abi::PluginKind;
pub use host::{Host, HostServices, Level, MetricKind, PluginSpan};
pub use plugin::{parse_config, ConfigError, NoConfig, Plugin, PluginError};

/// This crate's version, written into every dynamic plugin's declaration; the host loads plugins
/// built against a semver-compatible version of the plugin API.
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");
