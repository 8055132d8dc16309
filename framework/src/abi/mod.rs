//! The host side of the dynamic plugin ABI (the layout, the export macros and the plugin side are
//! in the plugin API, [`portcullis_plugin_api::abi`], re-exported here).
//!
//! [`validate_declaration`] checks a declaration read from a loaded library and returns a
//! [`ValidatedLibrary`] or a typed [`AbiError`]; [`ValidatedExport::create`] creates one of its
//! plugins with its configuration and the host's services ([`export_services`]) and wraps it as
//! the kind's trait object ([`DynamicMechanism`], [`DynamicAuthorizer`],
//! [`DynamicPrincipalBuilder`], [`DynamicLogin`], [`DynamicPolicy`], [`DynamicSubscriber`]), so
//! the rest of the host sees an ordinary `Arc<dyn SaslMechanism>`, `Arc<dyn Authorizer>`, ...
//! Opening libraries is the host's job (the framework does no I/O).
//!
//! Libraries are never unloaded: `dlclose` is unsound in general (thread-local destructors,
//! function pointers still held elsewhere), so plugin instances live for the rest of the process.
//!
//! `unsafe` in the framework is confined to this module; every block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

mod dynamic;
mod error;
mod services;
mod tables;
mod validate;

pub use dynamic::{
    CreateError, DynamicAuthorizer, DynamicLogin, DynamicMechanism, DynamicPolicy,
    DynamicPrincipalBuilder, DynamicSubscriber,
};
pub use error::{AbiError, AbiWarning};
pub use portcullis_plugin_api::abi::*;
pub use services::export_services;
pub use validate::{validate_declaration, ValidatedExport, ValidatedLibrary};

#[cfg(test)]
mod tests;
