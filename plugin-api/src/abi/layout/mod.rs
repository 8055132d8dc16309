//! The C layout shared by the host and plugins. Everything here is `#[repr(C)]` and holds only
//! integers, byte arrays, raw pointers and `extern "C"` function pointers; discriminants are plain
//! integer codes, never Rust enums, because a value outside a Rust enum's range is undefined
//! behaviour and the other side of the boundary was compiled by someone else.
//!
//! Frozen for [`super::ABI_VERSION`] 2. Fields may be appended to [`PluginDeclaration`] (the host
//! reads `decl_size`), to every function table (`table_size`), to [`AbiHostServices`] (its
//! `size` and `version`) and to [`AbiRequestContext`] (its `size`, once a reserved zero); any
//! other change bumps the ABI version.
//!
//! Ownership: the caller owns everything it passes in, for the duration of the call. Variable-size
//! results come back through an [`AbiSink`]: the callee hands the caller borrowed bytes, which the
//! caller copies before the call returns. Instances are created by the plugin and never freed;
//! per-exchange state is freed by the plugin's own `free_*` function.
//!
//! One file per part: the declaration, the data every kind shares, the host services, then one per
//! plugin kind; everything is re-exported here (and from [`crate::abi`]).

use std::mem::size_of;

mod authorizer;
mod common;
mod declaration;
mod events;
mod forwarding;
mod host_services;
mod login;
mod principal;
mod sasl;

pub use authorizer::*;
pub use common::*;
pub use declaration::*;
pub use events::*;
pub use forwarding::*;
pub use host_services::*;
pub use login::*;
pub use principal::*;
pub use sasl::*;

/// The size of each table in this copy of the API, by kind.
pub const fn table_size(kind: PluginKind) -> u32 {
    (match kind {
        PluginKind::SaslMechanism => size_of::<SaslMechanismTable>(),
        PluginKind::Authorizer => size_of::<AuthorizerTable>(),
        PluginKind::PrincipalBuilder => size_of::<PrincipalBuilderTable>(),
        PluginKind::LoginModule => size_of::<LoginModuleTable>(),
        PluginKind::ForwardingPolicy => size_of::<ForwardingPolicyTable>(),
        PluginKind::EventSubscriber => size_of::<EventSubscriberTable>(),
    }) as u32
}
