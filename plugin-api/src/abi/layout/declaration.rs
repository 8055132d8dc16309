//! What a library exports and the host reads first: the plugin kinds, the declaration and its
//! exports, and the `create` and name functions every export's table starts from.

use std::ffi::c_void;
use std::mem::size_of;

use super::common::{AbiBytes, AbiSink};
#[cfg(doc)]
use super::common::{PART_ERROR, STATUS_OK};
use super::host_services::AbiHostServices;

/// What an export provides; decides which function table its entry points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PluginKind {
    /// A server-side SASL mechanism: [`SaslMechanismTable`](crate::abi::SaslMechanismTable).
    SaslMechanism,
    /// An authorizer: [`AuthorizerTable`](crate::abi::AuthorizerTable).
    Authorizer,
    /// A principal builder: [`PrincipalBuilderTable`](crate::abi::PrincipalBuilderTable).
    PrincipalBuilder,
    /// A login module for the upstream: [`LoginModuleTable`](crate::abi::LoginModuleTable).
    LoginModule,
    /// A forwarding policy: [`ForwardingPolicyTable`](crate::abi::ForwardingPolicyTable).
    ForwardingPolicy,
    /// An event subscriber: [`EventSubscriberTable`](crate::abi::EventSubscriberTable).
    EventSubscriber,
}

impl PluginKind {
    /// Every kind, in code order.
    pub const ALL: [PluginKind; 6] = [
        PluginKind::SaslMechanism,
        PluginKind::Authorizer,
        PluginKind::PrincipalBuilder,
        PluginKind::LoginModule,
        PluginKind::ForwardingPolicy,
        PluginKind::EventSubscriber,
    ];

    /// The code written into [`PluginExport::kind`].
    pub const fn code(self) -> u32 {
        match self {
            PluginKind::SaslMechanism => 1,
            PluginKind::Authorizer => 2,
            PluginKind::PrincipalBuilder => 3,
            PluginKind::LoginModule => 4,
            PluginKind::ForwardingPolicy => 5,
            PluginKind::EventSubscriber => 6,
        }
    }

    /// The kind for a code, if this side knows it.
    pub const fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(PluginKind::SaslMechanism),
            2 => Some(PluginKind::Authorizer),
            3 => Some(PluginKind::PrincipalBuilder),
            4 => Some(PluginKind::LoginModule),
            5 => Some(PluginKind::ForwardingPolicy),
            6 => Some(PluginKind::EventSubscriber),
            _ => None,
        }
    }

    /// The name used in configuration and listings (`authorizer`, `principal builder`, ...).
    pub const fn label(self) -> &'static str {
        match self {
            PluginKind::SaslMechanism => "SASL mechanism",
            PluginKind::Authorizer => "authorizer",
            PluginKind::PrincipalBuilder => "principal builder",
            PluginKind::LoginModule => "login module",
            PluginKind::ForwardingPolicy => "forwarding policy",
            PluginKind::EventSubscriber => "event subscriber",
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A string stored inline in `N` bytes: UTF-8, NUL-terminated, NUL-padded. Inline so that the
/// host reads it without following a pointer the plugin controls.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedStr<const N: usize>([u8; N]);

impl<const N: usize> FixedStr<N> {
    /// Whether `s` fits whole (one byte is always kept for the terminating NUL).
    pub const fn fits(s: &str) -> bool {
        s.len() < N
    }

    /// Stores `s`, cut at a character boundary if it does not fit.
    // Indexing is bounded by the loop conditions, and this runs in const context where an
    // out-of-bounds access would be a compile error rather than a panic.
    #[allow(clippy::indexing_slicing)]
    pub const fn truncated(s: &str) -> Self {
        let bytes = s.as_bytes();
        let mut len = if bytes.len() < N {
            bytes.len()
        } else {
            N.saturating_sub(1)
        };
        // Back off continuation bytes (10xxxxxx) so that the stored prefix stays valid UTF-8.
        while len > 0 && len < bytes.len() && (bytes[len] & 0xC0) == 0x80 {
            len -= 1;
        }
        let mut out = [0u8; N];
        let mut i = 0;
        while i < len {
            out[i] = bytes[i];
            i += 1;
        }
        Self(out)
    }

    /// Builds one from raw bytes, as read from a foreign declaration.
    pub const fn from_bytes(bytes: [u8; N]) -> Self {
        Self(bytes)
    }

    /// The string, or `None` when there is no NUL terminator or the bytes are not UTF-8.
    pub fn to_str(&self) -> Option<&str> {
        let end = self.0.iter().position(|&b| b == 0)?;
        std::str::from_utf8(self.0.get(..end)?).ok()
    }
}

impl<const N: usize> std::fmt::Debug for FixedStr<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_str() {
            Some(s) => write!(f, "{s:?}"),
            None => write!(f, "<malformed {N}-byte string>"),
        }
    }
}

/// Set in [`PluginDeclaration::flags`] when the library was built with `panic = "unwind"`, i.e.
/// its exports can catch panics. A `panic = "abort"` plugin aborts the process on a panic.
pub const FLAG_PANIC_UNWIND: u32 = 1;

/// The declaration every plugin library exports as the data symbol
/// `PORTCULLIS_PLUGIN_DECLARATION`.
///
/// Reading it runs no plugin code. The first three fields are frozen forever; new fields are only
/// ever appended, and `decl_size` tells the host how many the plugin knows.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PluginDeclaration {
    /// Always [`crate::abi::PLUGIN_MAGIC`].
    pub magic: [u8; 8],
    /// The ABI version the plugin was built for ([`crate::abi::ABI_VERSION`]).
    pub abi_version: u32,
    /// `size_of::<PluginDeclaration>()` in the plugin's copy of the API.
    pub decl_size: u32,
    /// The plugin API version the plugin was built against ([`crate::API_VERSION`]).
    pub api_version: FixedStr<32>,
    /// The compiler that built the plugin ([`crate::abi::RUSTC_VERSION`]).
    pub rustc_version: FixedStr<128>,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// The version of [`AbiHostServices`] the plugin was built against
    /// ([`crate::abi::SERVICES_VERSION`]); informational: the plugin reads only the services the
    /// host's table has.
    pub services_version: u32,
    /// How many entries `exports` has (at least one).
    pub export_count: u32,
    /// Zero.
    pub reserved: u32,
    /// The plugins this library provides.
    pub exports: *const PluginExport,
}

/// One plugin of a library: its kind, its name and its function table.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PluginExport {
    /// A [`PluginKind`] code.
    pub kind: u32,
    /// Zero.
    pub reserved: u32,
    /// The plugin's name ([`crate::Plugin::NAME`]): its key in the host's `[plugins.config]`.
    pub name: FixedStr<64>,
    /// The function table for `kind` (e.g. a `*const SaslMechanismTable`).
    pub table: *const c_void,
}

// SAFETY: declarations and exports are immutable (they live in `static`s that nothing writes),
// and their pointers lead to other immutable statics made only of integers and function
// pointers, so sharing references between threads cannot race.
unsafe impl Sync for PluginDeclaration {}
// SAFETY: as for `Sync`: the raw pointer is to immutable, 'static data.
unsafe impl Send for PluginDeclaration {}
// SAFETY: as for `PluginDeclaration`.
unsafe impl Sync for PluginExport {}
// SAFETY: as for `PluginDeclaration`.
unsafe impl Send for PluginExport {}

/// `size_of::<PluginDeclaration>()` as written into `decl_size`.
pub const DECLARATION_SIZE: u32 = size_of::<PluginDeclaration>() as u32;

/// Creates a plugin instance from its configuration (UTF-8 TOML text of its table, possibly
/// empty; borrowed for the call) and the host's services (valid forever). On [`STATUS_OK`]
/// writes an opaque instance pointer to `instance`; otherwise writes an encoded creation error
/// (or, after a panic, its message) to `error`'s [`PART_ERROR`]. Instances are never freed.
pub type CreateFn = unsafe extern "C" fn(
    config: AbiBytes,
    services: *const AbiHostServices,
    instance: *mut *const c_void,
    error: *const AbiSink,
) -> u32;

/// Returns a UTF-8 name owned by the instance (valid forever): a mechanism's or a policy's name.
pub type NameFn = unsafe extern "C" fn(instance: *const c_void) -> AbiBytes;
