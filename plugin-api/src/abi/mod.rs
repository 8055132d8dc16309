//! The C ABI between the host and dynamic plugins: how a `cdylib` built against this crate
//! becomes a plugin the gateway loads from its plugin directory.
//!
//! Rust has no stable ABI, so nothing Rust-shaped crosses the library boundary. A library exports
//! one data symbol, [`DECLARATION_SYMBOL`], holding a `#[repr(C)]` [`PluginDeclaration`]: magic
//! bytes, ABI version, declaration size, the plugin API and compiler versions it was built with,
//! inline and fixed-size so that the host can check them before it follows a single pointer or
//! calls a single function. It points to the library's exports: one [`PluginExport`] per plugin
//! (kind, name, function table), so one library may provide several plugins of any kinds. The
//! tables hold `extern "C"` functions that exchange only `#[repr(C)]` data, `(pointer, length)`
//! byte slices and the encodings of [`codec`].
//!
//! The two halves:
//!
//! - **plugin side** (this crate): implement [`crate::Plugin`] and a kind trait, then call
//!   [`crate::export_plugins!`]. The macro writes the declaration and the tables; every generated
//!   function catches panics, so a panic never unwinds into the host. The host's services reach
//!   the plugin as a [`crate::Host`] backed by the versioned [`AbiHostServices`] table.
//! - **host side** (the framework's `portcullis::abi`): validates a declaration read from a
//!   loaded library, creates each plugin and wraps its table into the kind's trait object, so the
//!   rest of the host cannot tell a dynamic plugin from a built-in one.
//!
//! Libraries are never unloaded: `dlclose` is unsound in general (thread-local destructors,
//! function pointers still held elsewhere), so plugin instances live for the rest of the process.

pub mod codec;
mod export;
mod layout;
mod services;
pub mod sink;

pub use layout::*;

/// The first eight bytes of every declaration.
pub const PLUGIN_MAGIC: [u8; 8] = *b"PCULLIS\0";

/// The ABI version this crate speaks. Bumped whenever the layout of a type crossing the boundary
/// changes other than by appending fields to the declaration, a function table or the services
/// table. Version 1 (framework 0.1, SASL mechanisms only) is refused by this host.
pub const ABI_VERSION: u32 = 2;

/// The version of [`AbiHostServices`] this crate builds (host side) and knows (plugin side).
/// Version 1: log, log_enabled, now_ms, scram_credential, token, token_without_extension,
/// publish_metric. Later versions only append (tracing spans are the planned next slot).
pub const SERVICES_VERSION: u32 = 2;

/// The name of the data symbol every plugin library exports.
pub const DECLARATION_SYMBOL: &str = "PORTCULLIS_PLUGIN_DECLARATION";

/// The compiler that built this copy of the plugin API, e.g.
/// `rustc 1.95.0 (59807616e 2026-04-14) [x86_64-unknown-linux-gnu]`, or `unknown [..]`.
pub const RUSTC_VERSION: &str = env!("PORTCULLIS_RUSTC_VERSION");

/// Implementation details of the export macros; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use super::export::declaration;

    /// The export entry of a SASL mechanism plugin.
    pub const fn sasl_mechanism<T>() -> super::PluginExport
    where
        T: crate::Plugin + crate::sasl::SaslMechanism,
    {
        super::export::sasl::entry::<T>()
    }
    /// The export entry of an authorizer plugin.
    pub const fn authorizer<T>() -> super::PluginExport
    where
        T: crate::Plugin + crate::authorizer::Authorizer,
    {
        super::export::authorizer::entry::<T>()
    }
    /// The export entry of a principal builder plugin.
    pub const fn principal_builder<T>() -> super::PluginExport
    where
        T: crate::Plugin + crate::principal::PrincipalBuilder,
    {
        super::export::principal::entry::<T>()
    }
    /// The export entry of a login module plugin.
    pub const fn login_module<T>() -> super::PluginExport
    where
        T: crate::Plugin + crate::login::LoginModule,
    {
        super::export::login::entry::<T>()
    }
    /// The export entry of a forwarding policy plugin.
    pub const fn forwarding_policy<T>() -> super::PluginExport
    where
        T: crate::Plugin + crate::forwarding::ForwardingPolicy,
    {
        super::export::forwarding::entry::<T>()
    }
    /// The export entry of an event subscriber plugin.
    pub const fn event_subscriber<T>() -> super::PluginExport
    where
        T: crate::Plugin + crate::events::EventSubscriber,
    {
        super::export::events::entry::<T>()
    }

    /// Counts macro repetitions.
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __portcullis_count {
        () => { 0usize };
        ($head:tt $($tail:tt)*) => { 1usize + $crate::__portcullis_count!($($tail)*) };
    }
}

/// Exports plugins from a `cdylib` as a Portcullis plugin library.
///
/// Each entry is `kind: Type`, where `Type` implements [`crate::Plugin`] and the kind's trait:
///
/// | kind                | trait                                             |
/// |---------------------|---------------------------------------------------|
/// | `sasl_mechanism`    | [`crate::sasl::SaslMechanism`]                    |
/// | `authorizer`        | [`crate::authorizer::Authorizer`]                 |
/// | `principal_builder` | [`crate::principal::PrincipalBuilder`]            |
/// | `login_module`      | [`crate::login::LoginModule`]                     |
/// | `forwarding_policy` | [`crate::forwarding::ForwardingPolicy`]           |
/// | `event_subscriber`  | [`crate::events::EventSubscriber`]                |
///
/// Call it once per library, at the crate's top level:
///
/// ```ignore
/// portcullis_plugin_api::export_plugins! {
///     authorizer: PrefixAuthorizer,
///     event_subscriber: AuthLog,
/// }
/// ```
///
/// It defines the `PORTCULLIS_PLUGIN_DECLARATION` symbol and the function tables behind it. The
/// plugin author writes no `extern "C"` and no `unsafe`.
#[macro_export]
macro_rules! export_plugins {
    // Hidden: exports a declaration with an arbitrary ABI version. Only for tests of the host's
    // refusal path; a library built this way is refused by every host that does not speak it.
    (@abi_version $abi_version:expr; $($kind:ident : $plugin:ty),+ $(,)?) => {
        const _: () = {
            static PORTCULLIS_PLUGIN_EXPORTS: [$crate::abi::PluginExport; $crate::__portcullis_count!($($kind)+)] = [
                $($crate::abi::__private::$kind::<$plugin>()),+
            ];
            #[unsafe(no_mangle)]
            static PORTCULLIS_PLUGIN_DECLARATION: $crate::abi::PluginDeclaration =
                $crate::abi::__private::declaration(&PORTCULLIS_PLUGIN_EXPORTS, $abi_version);
        };
    };
    ($($kind:ident : $plugin:ty),+ $(,)?) => {
        $crate::export_plugins!(@abi_version $crate::abi::ABI_VERSION; $($kind : $plugin),+);
    };
}
