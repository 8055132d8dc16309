//! The C layout shared by the host and plugins. Everything here is `#[repr(C)]` and holds only
//! integers, byte arrays, raw pointers and `extern "C"` function pointers; discriminants are plain
//! `u32` codes, never Rust enums, because a value outside a Rust enum's range is undefined
//! behaviour and the other side of the boundary was compiled by someone else.
//!
//! Frozen for [`super::ABI_VERSION`] 1. Fields may be appended to [`PluginDeclaration`] (the host
//! reads `decl_size`) and to [`SaslMechanismTable`] (`table_size`); any other change bumps the
//! ABI version.

use std::ffi::c_void;
use std::mem::size_of;

/// The only plugin kind code of ABI version 1: a SASL mechanism.
const KIND_SASL_MECHANISM: u32 = 1;

/// What a plugin provides; decides which function table its declaration points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PluginKind {
    /// A server-side SASL mechanism; the table is a [`SaslMechanismTable`].
    SaslMechanism,
}

impl PluginKind {
    /// The code written into [`PluginDeclaration::kind`].
    pub const fn code(self) -> u32 {
        match self {
            PluginKind::SaslMechanism => KIND_SASL_MECHANISM,
        }
    }
    /// The kind for a declaration's code, if this host knows it.
    pub const fn from_code(code: u32) -> Option<Self> {
        match code {
            KIND_SASL_MECHANISM => Some(PluginKind::SaslMechanism),
            _ => None,
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginKind::SaslMechanism => f.write_str("SASL mechanism"),
        }
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

/// Set in [`PluginDeclaration::flags`] when the plugin was built with `panic = "unwind"`, i.e.
/// its exports can catch panics. A `panic = "abort"` plugin aborts the process on a panic.
pub const FLAG_PANIC_UNWIND: u32 = 1;

/// The declaration every plugin exports as the data symbol `PORTCULLIS_PLUGIN_DECLARATION`.
///
/// Reading it runs no plugin code. The first three fields are frozen forever; new fields are only
/// ever appended, and `decl_size` tells the host how many the plugin knows.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PluginDeclaration {
    /// Always [`super::PLUGIN_MAGIC`].
    pub magic: [u8; 8],
    /// The ABI version the plugin was built for ([`super::ABI_VERSION`]).
    pub abi_version: u32,
    /// `size_of::<PluginDeclaration>()` in the plugin's framework.
    pub decl_size: u32,
    /// The framework version the plugin was built against ([`crate::FRAMEWORK_VERSION`]).
    pub framework_version: FixedStr<32>,
    /// The compiler that built the plugin ([`super::RUSTC_VERSION`]).
    pub rustc_version: FixedStr<128>,
    /// The plugin's name: its key in the host's `[plugins.config.<name>]` table.
    pub name: FixedStr<64>,
    /// A [`PluginKind`] code.
    pub kind: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// The function table for `kind`: a `*const SaslMechanismTable` for a SASL mechanism.
    pub table: *const c_void,
}

// SAFETY: the declaration is immutable (it lives in a `static` that nothing writes), and `table`
// points to another immutable static made only of integers and function pointers, so sharing a
// reference between threads cannot race.
unsafe impl Sync for PluginDeclaration {}
// SAFETY: as for `Sync`: the raw pointer is to immutable, 'static data.
unsafe impl Send for PluginDeclaration {}

/// `size_of::<PluginDeclaration>()` as written into `decl_size`.
pub(crate) const DECLARATION_SIZE: u32 = size_of::<PluginDeclaration>() as u32;

/// A borrowed byte slice crossing the boundary: `ptr` may be null only when `len` is 0.
///
/// Who owns the bytes and how long they stay valid is stated by each function that passes one.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiBytes {
    /// The first byte.
    pub ptr: *const u8,
    /// The number of bytes.
    pub len: usize,
}

impl AbiBytes {
    /// The empty slice.
    pub const EMPTY: AbiBytes = AbiBytes {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// Borrows `bytes` (the caller keeps them alive as long as the other side may read them).
    pub fn from_slice(bytes: &[u8]) -> Self {
        Self {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// The bytes, or `None` for a null pointer with a non-zero length or a length no allocation
    /// can have.
    ///
    /// # Safety
    ///
    /// Unless `ptr` is null or `len` is 0, `ptr` must be valid for reads of `len` bytes for `'a`,
    /// and nothing may write to them during `'a`.
    pub(crate) unsafe fn as_slice<'a>(self) -> Option<&'a [u8]> {
        if self.len == 0 {
            return Some(&[]);
        }
        if self.ptr.is_null() || self.len > isize::MAX as usize {
            return None;
        }
        // SAFETY: non-null, length within isize::MAX, and the caller guarantees the bytes are
        // readable and unchanged for 'a.
        Some(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }
}

/// A buffer owned by the caller that the callee fills: at most `capacity` bytes at `ptr`, then
/// the number written in `len`.
#[repr(C)]
#[derive(Debug)]
pub struct AbiBuf {
    /// The buffer.
    pub ptr: *mut u8,
    /// Its size in bytes.
    pub capacity: usize,
    /// How many bytes the callee wrote.
    pub len: usize,
}

/// `ipv4` in [`AbiExchangeContext::address_family`]: the first 4 address bytes are used.
pub const ADDRESS_FAMILY_V4: u32 = 4;
/// `ipv6` in [`AbiExchangeContext::address_family`]: all 16 address bytes are used.
pub const ADDRESS_FAMILY_V6: u32 = 6;

/// [`crate::sasl::ExchangeContext`] in C layout. Valid only during the `start` call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiExchangeContext {
    /// [`ADDRESS_FAMILY_V4`] or [`ADDRESS_FAMILY_V6`].
    pub address_family: u32,
    /// Zero.
    pub reserved: u32,
    /// The client's address in network byte order.
    pub address: [u8; 16],
    /// Milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// The listener's name (UTF-8).
    pub listener: AbiBytes,
}

/// The plugin did not write a result (the host pre-fills this; it is treated as a failure).
pub const OUTCOME_UNSET: u32 = 0;
/// Send `bytes` to the client and wait for its next token.
pub const OUTCOME_CONTINUE: u32 = 1;
/// Authenticated: `authorization_id`, `bytes` (the final server token) and the optional fields.
pub const OUTCOME_COMPLETE: u32 = 2;
/// Failed; `bytes` is a message the client may see.
pub const OUTCOME_FAIL_VISIBLE: u32 = 3;
/// Failed; `bytes` is a reason for the log only.
pub const OUTCOME_FAIL_HIDDEN: u32 = 4;

/// The result of one `step`. Every slice points into buffers owned by the plugin's exchange and
/// stays valid until the next call on that exchange (`step` or `free_exchange`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiStepResult {
    /// An `OUTCOME_*` code.
    pub outcome: u32,
    /// 1 when `credential_expiry_ms` is set, else 0.
    pub has_credential_expiry: u32,
    /// When the credential used stops being valid, in ms since the epoch.
    pub credential_expiry_ms: i64,
    /// The server token (continue, complete) or the failure message.
    pub bytes: AbiBytes,
    /// The authorization id (complete only; UTF-8).
    pub authorization_id: AbiBytes,
    /// 1 when `token_id` is set, else 0.
    pub has_token_id: u32,
    /// Zero.
    pub reserved: u32,
    /// The delegation token id (complete only; UTF-8).
    pub token_id: AbiBytes,
    /// Negotiated extensions: repeated `u32 LE length, key, u32 LE length, value` (UTF-8).
    pub extensions: AbiBytes,
}

impl AbiStepResult {
    /// A result the plugin has not written yet.
    pub const UNSET: AbiStepResult = AbiStepResult {
        outcome: OUTCOME_UNSET,
        has_credential_expiry: 0,
        credential_expiry_ms: 0,
        bytes: AbiBytes::EMPTY,
        authorization_id: AbiBytes::EMPTY,
        has_token_id: 0,
        reserved: 0,
        token_id: AbiBytes::EMPTY,
        extensions: AbiBytes::EMPTY,
    };
}

/// `create` succeeded and wrote the instance.
pub const CREATE_OK: u32 = 0;
/// `create` failed (e.g. the configuration was rejected); the message is in the error buffer.
pub const CREATE_ERROR: u32 = 1;
/// `create` panicked; the panic message is in the error buffer.
pub const CREATE_PANICKED: u32 = 2;

/// Creates the mechanism instance from its configuration (UTF-8 TOML text, possibly empty;
/// borrowed for the call). On [`CREATE_OK`] writes an opaque instance pointer to `instance`;
/// otherwise writes a UTF-8 message into `error`. Instances are never freed.
pub type CreateFn =
    unsafe extern "C" fn(config: AbiBytes, instance: *mut *const c_void, error: *mut AbiBuf) -> u32;
/// The mechanism name (UTF-8), owned by the instance (valid forever).
pub type MechanismNameFn = unsafe extern "C" fn(instance: *const c_void) -> AbiBytes;
/// Starts an exchange; returns an opaque exchange pointer, or null if the plugin failed.
/// May be called from several threads at once on one instance.
pub type StartFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiExchangeContext,
) -> *mut c_void;
/// Feeds the client's token (borrowed for the call) to an exchange and writes the result to
/// `out`. Calls on one exchange never overlap.
pub type StepFn =
    unsafe extern "C" fn(exchange: *mut c_void, input: AbiBytes, out: *mut AbiStepResult);
/// Frees an exchange; it is not used again.
pub type FreeExchangeFn = unsafe extern "C" fn(exchange: *mut c_void);

/// The functions of a [`PluginKind::SaslMechanism`] plugin. Every entry must be non-null; the
/// `Option`s only let the host check that instead of trusting it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SaslMechanismTable {
    /// `size_of::<SaslMechanismTable>()` in the plugin's framework.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`MechanismNameFn`].
    pub mechanism_name: Option<MechanismNameFn>,
    /// See [`StartFn`].
    pub start: Option<StartFn>,
    /// See [`StepFn`].
    pub step: Option<StepFn>,
    /// See [`FreeExchangeFn`].
    pub free_exchange: Option<FreeExchangeFn>,
}

/// `size_of::<SaslMechanismTable>()` as written into `table_size`.
pub(crate) const SASL_TABLE_SIZE: u32 = size_of::<SaslMechanismTable>() as u32;
