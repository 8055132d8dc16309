//! The dynamic plugin ABI: how a SASL mechanism built as a separate `cdylib` is loaded by the host.
//!
//! Rust has no stable ABI, so nothing Rust-shaped crosses the library boundary. A plugin exports
//! one data symbol, [`DECLARATION_SYMBOL`], holding a `#[repr(C)]` [`PluginDeclaration`]: magic
//! bytes, ABI version, declaration size, the framework and compiler versions it was built with,
//! its name and kind, inline and fixed-size so that the host can check them before it follows a
//! single pointer or calls a single function. After them comes a pointer to a table of
//! `extern "C"` functions ([`SaslMechanismTable`]) that exchange only `#[repr(C)]` data and
//! `(pointer, length)` byte slices.
//!
//! The two halves:
//!
//! - **plugin side**: implement [`crate::sasl::SaslMechanism`] and [`MechanismPlugin`], then call
//!   [`crate::export_sasl_mechanism!`]. The macro generates the declaration and the table; every
//!   generated function catches panics, so a panic never unwinds into the host.
//! - **host side**: [`validate_declaration`] checks a declaration read from a loaded library and
//!   returns a [`ValidatedPlugin`] or a typed [`AbiError`]; [`ValidatedPlugin::create_sasl_mechanism`]
//!   builds a [`DynamicMechanism`], which implements [`crate::sasl::SaslMechanism`] so the rest
//!   of the host sees an ordinary `Arc<dyn SaslMechanism>`. Opening libraries is the host's job
//!   (the framework does no I/O).
//!
//! Libraries are never unloaded: `dlclose` is unsound in general (thread-local destructors,
//! function pointers still held elsewhere), so plugin instances live for the rest of the process.
//!
//! `unsafe` in the framework is confined to this module; every block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

mod config;
mod export;
mod extensions;
mod host;
mod layout;
mod validate;

pub use config::{ConfigError, PluginConfig};
pub use export::MechanismPlugin;
pub use host::DynamicMechanism;
pub use layout::{
    AbiBuf, AbiBytes, AbiExchangeContext, AbiStepResult, CreateFn, FixedStr, FreeExchangeFn,
    MechanismNameFn, PluginDeclaration, PluginKind, SaslMechanismTable, StartFn, StepFn,
    ADDRESS_FAMILY_V4, ADDRESS_FAMILY_V6, CREATE_ERROR, CREATE_OK, CREATE_PANICKED,
    FLAG_PANIC_UNWIND, OUTCOME_COMPLETE, OUTCOME_CONTINUE, OUTCOME_FAIL_HIDDEN,
    OUTCOME_FAIL_VISIBLE, OUTCOME_UNSET,
};
pub use validate::{validate_declaration, AbiError, AbiWarning, ValidatedPlugin};

/// The first eight bytes of every declaration.
pub const PLUGIN_MAGIC: [u8; 8] = *b"PCULLIS\0";

/// The ABI version this framework speaks. Bumped whenever the layout of a type crossing the
/// boundary changes other than by appending fields to the declaration or the function table.
pub const ABI_VERSION: u32 = 1;

/// The name of the data symbol every plugin exports.
pub const DECLARATION_SYMBOL: &str = "PORTCULLIS_PLUGIN_DECLARATION";

/// The compiler that built this copy of the framework, e.g.
/// `rustc 1.95.0 (59807616e 2026-04-14) [x86_64-unknown-linux-gnu]`, or `unknown [..]`.
pub const RUSTC_VERSION: &str = portcullis_plugin_api::abi::RUSTC_VERSION;

/// Implementation details of [`crate::export_sasl_mechanism!`]; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use super::export::{sasl_mechanism_declaration, sasl_mechanism_table};
}

/// Exports a SASL mechanism from a `cdylib` as a Portcullis dynamic plugin.
///
/// `$mechanism` must implement [`crate::sasl::SaslMechanism`] and [`crate::abi::MechanismPlugin`].
/// Call it once per plugin crate, at the crate's top level:
///
/// ```ignore
/// portcullis::export_sasl_mechanism!(MyMechanism);
/// ```
///
/// It defines the `PORTCULLIS_PLUGIN_DECLARATION` symbol and the function table behind it. The
/// plugin author writes no `extern "C"` and no `unsafe`.
#[macro_export]
macro_rules! export_sasl_mechanism {
    // Hidden: exports a declaration with an arbitrary ABI version. Only for tests of the host's
    // refusal path; a plugin built this way is refused by every host that does not speak it.
    (@abi_version $abi_version:expr, $mechanism:ty) => {
        const _: () = {
            static PORTCULLIS_SASL_MECHANISM_TABLE: $crate::abi::SaslMechanismTable =
                $crate::abi::__private::sasl_mechanism_table::<$mechanism>();
            #[unsafe(no_mangle)]
            static PORTCULLIS_PLUGIN_DECLARATION: $crate::abi::PluginDeclaration =
                $crate::abi::__private::sasl_mechanism_declaration::<$mechanism>(
                    &PORTCULLIS_SASL_MECHANISM_TABLE,
                    $abi_version,
                );
        };
    };
    ($mechanism:ty) => {
        $crate::export_sasl_mechanism!(@abi_version $crate::abi::ABI_VERSION, $mechanism);
    };
}

#[cfg(test)]
mod tests;
