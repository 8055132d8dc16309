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

use std::ffi::c_void;
use std::mem::size_of;

/// What an export provides; decides which function table its entry points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PluginKind {
    /// A server-side SASL mechanism: [`SaslMechanismTable`].
    SaslMechanism,
    /// An authorizer: [`AuthorizerTable`].
    Authorizer,
    /// A principal builder: [`PrincipalBuilderTable`].
    PrincipalBuilder,
    /// A login module for the upstream: [`LoginModuleTable`].
    LoginModule,
    /// A forwarding policy: [`ForwardingPolicyTable`].
    ForwardingPolicy,
    /// An event subscriber: [`EventSubscriberTable`].
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
    /// Always [`super::PLUGIN_MAGIC`].
    pub magic: [u8; 8],
    /// The ABI version the plugin was built for ([`super::ABI_VERSION`]).
    pub abi_version: u32,
    /// `size_of::<PluginDeclaration>()` in the plugin's copy of the API.
    pub decl_size: u32,
    /// The plugin API version the plugin was built against ([`crate::API_VERSION`]).
    pub api_version: FixedStr<32>,
    /// The compiler that built the plugin ([`super::RUSTC_VERSION`]).
    pub rustc_version: FixedStr<128>,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// The version of [`AbiHostServices`] the plugin was built against
    /// ([`super::SERVICES_VERSION`]); informational: the plugin reads only the services the
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
    #[inline]
    pub fn from_slice(bytes: &[u8]) -> Self {
        Self {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// Borrows a string's bytes.
    #[inline]
    pub fn from_text(text: &str) -> Self {
        Self::from_slice(text.as_bytes())
    }

    /// The bytes, or `None` for a null pointer with a non-zero length or a length no allocation
    /// can have.
    ///
    /// # Safety
    ///
    /// Unless `ptr` is null or `len` is 0, `ptr` must be valid for reads of `len` bytes for `'a`,
    /// and nothing may write to them during `'a`.
    #[inline]
    pub unsafe fn as_slice<'a>(self) -> Option<&'a [u8]> {
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

    /// The bytes as UTF-8, or `None` (see [`AbiBytes::as_slice`]).
    ///
    /// # Safety
    ///
    /// As for [`AbiBytes::as_slice`].
    pub unsafe fn as_str<'a>(self) -> Option<&'a str> {
        // SAFETY: forwarded to the caller.
        let bytes = unsafe { self.as_slice() }?;
        std::str::from_utf8(bytes).ok()
    }
}

/// Writes one part of a variable-size result: `part` says which (a `PART_*` code of the call),
/// `bytes` are borrowed for the duration of the `write` call only.
pub type SinkWriteFn = unsafe extern "C" fn(context: *mut c_void, part: u32, bytes: AbiBytes);

/// Where a callee writes variable-size results: it calls `write` zero or more times before it
/// returns, and the caller copies each part.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiSink {
    /// The caller's state, passed back to `write`.
    pub context: *mut c_void,
    /// Copies one part (null: results are discarded).
    pub write: Option<SinkWriteFn>,
}

/// The call succeeded.
pub const STATUS_OK: u32 = 0;
/// The plugin reported a failure; the message is in the sink's [`PART_ERROR`].
pub const STATUS_ERROR: u32 = 1;
/// The plugin panicked; the panic message is in the sink's [`PART_ERROR`]. Any status a host
/// does not know counts as a failure too.
pub const STATUS_PANICKED: u32 = 2;

/// A sink part: the message of an error or a panic (UTF-8), or for `create` an encoded
/// creation error (see `codec`).
pub const PART_ERROR: u32 = 0;
/// A sink part: the first value of the result (its meaning is the call's).
pub const PART_VALUE: u32 = 1;
/// A sink part: a second value (its meaning is the call's).
pub const PART_SECOND: u32 = 2;

/// The services the host hands a plugin at `create`, versioned: fields are only appended, `size`
/// and `version` say how many the host has, and a plugin built against a longer table uses only
/// what this one holds (a missing service is a no-op). Valid for the life of the process.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiHostServices {
    /// [`super::SERVICES_VERSION`] of the host that built the table.
    pub version: u32,
    /// `size_of::<AbiHostServices>()` in the host.
    pub size: u32,
    /// The host's state for this plugin (passed back to every function).
    pub context: *const c_void,
    /// Logs a UTF-8 message at a `LEVEL_*`, attributed to the plugin.
    pub log: Option<unsafe extern "C" fn(context: *const c_void, level: u32, message: AbiBytes)>,
    /// Whether a message at this `LEVEL_*` would be logged (1) or not (0).
    pub log_enabled: Option<unsafe extern "C" fn(context: *const c_void, level: u32) -> u32>,
    /// Milliseconds since the Unix epoch.
    pub now_ms: Option<unsafe extern "C" fn(context: *const c_void) -> i64>,
    /// Looks up a user's SCRAM credential (`mechanism`: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512); when
    /// found, writes it to the sink's [`PART_VALUE`] (see `codec::encode_scram_credential`) and
    /// returns 1, else 0.
    pub scram_credential: Option<
        unsafe extern "C" fn(
            context: *const c_void,
            user: AbiBytes,
            mechanism: u32,
            sink: *const AbiSink,
        ) -> u32,
    >,
    /// Looks up a delegation token with its SCRAM credential for `mechanism`; when found,
    /// writes it to [`PART_VALUE`] (`codec::encode_token_credential`) and returns 1, else 0.
    pub token: Option<
        unsafe extern "C" fn(
            context: *const c_void,
            token_id: AbiBytes,
            mechanism: u32,
            sink: *const AbiSink,
        ) -> u32,
    >,
    /// `TokenView::accepts_token_without_extension` (1 or 0).
    pub token_without_extension:
        Option<unsafe extern "C" fn(context: *const c_void, name: AbiBytes) -> u32>,
    /// Publishes a metric value (`kind`: a `METRIC_*` code).
    pub publish_metric:
        Option<unsafe extern "C" fn(context: *const c_void, kind: u32, name: AbiBytes, value: f64)>,
    /// (Services version 2.) Opens a span named by the UTF-8 `name` as a child of the host's
    /// current span and makes it current on the calling thread; returns its handle, or 0 when
    /// the host traces nothing (then `span_exit` need not be called). The plugin's log lines go
    /// to the innermost open span.
    pub span_enter: Option<unsafe extern "C" fn(context: *const c_void, name: AbiBytes) -> u64>,
    /// (Services version 2.) Closes the span `handle` from `span_enter`, on the thread that
    /// opened it, and any span the plugin opened inside it and left open.
    pub span_exit: Option<unsafe extern "C" fn(context: *const c_void, handle: u64)>,
}

// SAFETY: the table is immutable once built, and the host promises its functions may be called
// from any thread with its `context`.
unsafe impl Sync for AbiHostServices {}
// SAFETY: as for `Sync`.
unsafe impl Send for AbiHostServices {}

/// `size_of::<AbiHostServices>()` in this copy of the API.
pub const SERVICES_SIZE: u32 = size_of::<AbiHostServices>() as u32;

/// [`crate::Level::Error`].
pub const LEVEL_ERROR: u32 = 1;
/// [`crate::Level::Warn`].
pub const LEVEL_WARN: u32 = 2;
/// [`crate::Level::Info`].
pub const LEVEL_INFO: u32 = 3;
/// [`crate::Level::Debug`].
pub const LEVEL_DEBUG: u32 = 4;
/// [`crate::Level::Trace`].
pub const LEVEL_TRACE: u32 = 5;

/// [`crate::MetricKind::Counter`].
pub const METRIC_COUNTER: u32 = 1;
/// [`crate::MetricKind::Gauge`].
pub const METRIC_GAUGE: u32 = 2;
/// [`crate::MetricKind::Histogram`].
pub const METRIC_HISTOGRAM: u32 = 3;

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

// ---- IP addresses ------------------------------------------------------------------------------

/// An IPv4 address: the first 4 address bytes are used.
pub const ADDRESS_FAMILY_V4: u32 = 4;
/// An IPv6 address: all 16 address bytes are used.
pub const ADDRESS_FAMILY_V6: u32 = 6;

/// An IP address in C layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbiAddress {
    /// [`ADDRESS_FAMILY_V4`] or [`ADDRESS_FAMILY_V6`].
    pub family: u32,
    /// The address in network byte order.
    pub bytes: [u8; 16],
}

impl From<std::net::IpAddr> for AbiAddress {
    fn from(address: std::net::IpAddr) -> Self {
        match address {
            std::net::IpAddr::V4(v4) => {
                let mut bytes = [0u8; 16];
                for (slot, byte) in bytes.iter_mut().zip(v4.octets()) {
                    *slot = byte;
                }
                Self {
                    family: ADDRESS_FAMILY_V4,
                    bytes,
                }
            }
            std::net::IpAddr::V6(v6) => Self {
                family: ADDRESS_FAMILY_V6,
                bytes: v6.octets(),
            },
        }
    }
}

impl From<AbiAddress> for std::net::IpAddr {
    /// An unknown family reads as `0.0.0.0`.
    fn from(address: AbiAddress) -> Self {
        let [a, b, c, d, ..] = address.bytes;
        match address.family {
            ADDRESS_FAMILY_V6 => std::net::IpAddr::V6(address.bytes.into()),
            ADDRESS_FAMILY_V4 => std::net::IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)),
            _ => std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        }
    }
}

// ---- SASL mechanisms -----------------------------------------------------------------------------

/// [`crate::sasl::ExchangeContext`] in C layout. Valid only during the `start` call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiExchangeContext {
    /// The client's address.
    pub address: AbiAddress,
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
    /// 1 when `credential_key` is set, else 0.
    pub has_credential_key: u32,
    /// The delegation token id (complete only; UTF-8).
    pub token_id: AbiBytes,
    /// Negotiated extensions (`codec::encode_string_map`).
    pub extensions: AbiBytes,
    /// What verified the client, in the plugin's terms (`CredentialId::Plugin` key; UTF-8).
    pub credential_key: AbiBytes,
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
        has_credential_key: 0,
        token_id: AbiBytes::EMPTY,
        extensions: AbiBytes::EMPTY,
        credential_key: AbiBytes::EMPTY,
    };
}

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
pub type FreeFn = unsafe extern "C" fn(exchange: *mut c_void);

/// The functions of a [`PluginKind::SaslMechanism`] plugin. Every entry must be non-null; the
/// `Option`s only let the host check that instead of trusting it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SaslMechanismTable {
    /// `size_of::<SaslMechanismTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// The mechanism name clients send in SaslHandshake; see [`NameFn`].
    pub mechanism_name: Option<NameFn>,
    /// See [`StartFn`].
    pub start: Option<StartFn>,
    /// See [`StepFn`].
    pub step: Option<StepFn>,
    /// Frees an exchange; see [`FreeFn`].
    pub free_exchange: Option<FreeFn>,
}

// ---- Authorizers ---------------------------------------------------------------------------------

/// [`crate::authorizer::RequestContext`] in C layout, borrowed for one call.
///
/// Grown by appending, within ABI 2: the fields after `client_id` (the bearer token's groups,
/// scopes and id) were added later, and `size` says whether the host wrote them. A host from
/// before them writes 0 there (the field was a reserved zero) and lends a context that ends at
/// `client_id` ([`REQUEST_CONTEXT_SIZE_V1`] bytes), so a plugin reads a trailing field only when
/// `size` covers it; a plugin from before them never looks past `client_id`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiRequestContext {
    /// The principal type (UTF-8).
    pub principal_type: AbiBytes,
    /// The principal name (UTF-8).
    pub principal_name: AbiBytes,
    /// The client's address.
    pub address: AbiAddress,
    /// The listener's name (UTF-8).
    pub listener: AbiBytes,
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id.
    pub correlation_id: i32,
    /// 1 when `client_id` is set.
    pub has_client_id: u32,
    /// `size_of::<AbiRequestContext>()` in the host's copy of the API ([`REQUEST_CONTEXT_SIZE`]);
    /// 0 from a host whose context ends at `client_id`.
    pub size: u32,
    /// The client id (UTF-8).
    pub client_id: AbiBytes,
    /// The session's group principals: an array of `group_count` (null when 0).
    pub groups: *const AbiPrincipal,
    /// How many entries `groups` has.
    pub group_count: usize,
    /// The bearer token's scopes (UTF-8 each): an array of `scope_count` (null when 0).
    pub scopes: *const AbiBytes,
    /// How many entries `scopes` has.
    pub scope_count: usize,
    /// 1 when `jti` is set.
    pub has_jti: u32,
    /// Zero.
    pub reserved: u32,
    /// The bearer token's id, its `jti` claim (UTF-8).
    pub jti: AbiBytes,
}

impl AbiRequestContext {
    /// A context that names nothing: empty strings, address `0.0.0.0`, no client id, no token
    /// fields, `size` [`REQUEST_CONTEXT_SIZE`].
    pub const EMPTY: AbiRequestContext = AbiRequestContext {
        principal_type: AbiBytes::EMPTY,
        principal_name: AbiBytes::EMPTY,
        address: AbiAddress {
            family: ADDRESS_FAMILY_V4,
            bytes: [0; 16],
        },
        listener: AbiBytes::EMPTY,
        api_key: 0,
        api_version: 0,
        correlation_id: 0,
        has_client_id: 0,
        size: REQUEST_CONTEXT_SIZE,
        client_id: AbiBytes::EMPTY,
        groups: std::ptr::null(),
        group_count: 0,
        scopes: std::ptr::null(),
        scope_count: 0,
        has_jti: 0,
        reserved: 0,
        jti: AbiBytes::EMPTY,
    };
}

/// `size_of::<AbiRequestContext>()` in this copy of the API, as the host writes it into
/// [`AbiRequestContext::size`].
pub const REQUEST_CONTEXT_SIZE: u32 = size_of::<AbiRequestContext>() as u32;

/// The size of an [`AbiRequestContext`] that ends at `client_id`: what a host from before the
/// token fields lends (and marks with `size` 0).
pub const REQUEST_CONTEXT_SIZE_V1: u32 =
    (std::mem::offset_of!(AbiRequestContext, client_id) + size_of::<AbiBytes>()) as u32;

/// A principal in C layout (`type:name`), borrowed for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiPrincipal {
    /// The principal type (UTF-8).
    pub kind: AbiBytes,
    /// The principal name (UTF-8).
    pub name: AbiBytes,
}

/// [`crate::authorizer::Action::log_if_allowed`].
pub const ACTION_LOG_IF_ALLOWED: u32 = 1;
/// [`crate::authorizer::Action::log_if_denied`].
pub const ACTION_LOG_IF_DENIED: u32 = 2;

/// [`crate::authorizer::Action`] in C layout, borrowed for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiAction {
    /// The operation's Kafka code (`AclOperation::code`).
    pub operation: i32,
    /// The resource type's Kafka code.
    pub resource_type: i32,
    /// The pattern type's Kafka code (LITERAL for every action the host builds).
    pub pattern_type: i32,
    /// How many times the request references the resource.
    pub reference_count: u32,
    /// `ACTION_LOG_*` bits.
    pub flags: u32,
    /// Zero.
    pub reserved: u32,
    /// The resource name (UTF-8).
    pub name: AbiBytes,
}

impl AbiAction {
    /// An action that names nothing (an unused slot).
    pub const EMPTY: AbiAction = AbiAction {
        operation: 0,
        resource_type: 0,
        pattern_type: 0,
        reference_count: 0,
        flags: 0,
        reserved: 0,
        name: AbiBytes::EMPTY,
    };
}

/// Denied (also what a zeroed answer means: an answer the plugin did not write fails closed).
pub const DECISION_DENIED: u32 = 0;
/// Allowed.
pub const DECISION_ALLOWED: u32 = 1;

/// No matching ALLOW.
pub const RULE_DEFAULT_DENY: u32 = 0;
/// No ACL exists for the resource and everyone is allowed then.
pub const RULE_DEFAULT_ALLOW: u32 = 1;
/// The principal is a super user.
pub const RULE_SUPER_USER: u32 = 2;
/// A rule of the plugin's own (an ACL, a naming convention, ...): the host reports the plugin.
pub const RULE_PLUGIN: u32 = 3;

/// One answer of `authorize`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbiAuthorization {
    /// `DECISION_*`.
    pub decision: u32,
    /// `RULE_*`.
    pub rule: u32,
}

/// Decides `count` actions (an array borrowed for the call) for `context`, writing one answer per
/// action to `out` (an array of `count`, pre-filled with denials by the host). Returns a
/// `STATUS_*`; on anything but [`STATUS_OK`] the host denies every action.
pub type AuthorizeFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiRequestContext,
    actions: *const AbiAction,
    count: usize,
    out: *mut AbiAuthorization,
) -> u32;
/// `authorize_by_resource_type`: returns a `DECISION_*` (a panic is [`DECISION_DENIED`]).
pub type AuthorizeByTypeFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiRequestContext,
    operation: i32,
    resource_type: i32,
) -> u32;
/// Whether the instance stores ACLs (1) and the ACL functions may be called.
pub type HasAclAdminFn = unsafe extern "C" fn(instance: *const c_void) -> u32;
/// An ACL administration call: the input is encoded (`codec`), the result goes to the sink's
/// [`PART_VALUE`] (encoded), an error to [`PART_ERROR`]; returns a `STATUS_*`.
pub type AclCallFn =
    unsafe extern "C" fn(instance: *const c_void, input: AbiBytes, sink: *const AbiSink) -> u32;

/// The functions of a [`PluginKind::Authorizer`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AuthorizerTable {
    /// `size_of::<AuthorizerTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`AuthorizeFn`].
    pub authorize: Option<AuthorizeFn>,
    /// See [`AuthorizeByTypeFn`].
    pub authorize_by_resource_type: Option<AuthorizeByTypeFn>,
    /// See [`HasAclAdminFn`].
    pub has_acl_admin: Option<HasAclAdminFn>,
    /// `create_acls`: input bindings, output one result per binding.
    pub create_acls: Option<AclCallFn>,
    /// `delete_acls`: input filters, output the deleted bindings per filter.
    pub delete_acls: Option<AclCallFn>,
    /// `describe_acls`: input one filter, output the matching bindings.
    pub describe_acls: Option<AclCallFn>,
}

// ---- Principal builders --------------------------------------------------------------------------

/// [`crate::principal::AuthenticationContext`] in C layout, borrowed for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiAuthenticationContext {
    /// 1 when a SASL exchange completed (the `sasl_*` fields are set).
    pub has_sasl: u32,
    /// 1 when the connection runs over TLS (the `tls_*` fields are set).
    pub has_tls: u32,
    /// The SASL mechanism (UTF-8).
    pub sasl_mechanism: AbiBytes,
    /// The authorization id (UTF-8).
    pub sasl_authorization_id: AbiBytes,
    /// 1 when `sasl_token_id` is set.
    pub sasl_has_token_id: u32,
    /// 1 when `sasl_credential_expiry_ms` is set.
    pub sasl_has_credential_expiry: u32,
    /// The delegation token id (UTF-8).
    pub sasl_token_id: AbiBytes,
    /// The credential's expiry, ms since the epoch.
    pub sasl_credential_expiry_ms: i64,
    /// The negotiated extensions (`codec::encode_string_map`).
    pub sasl_extensions: AbiBytes,
    /// 1 when `tls_subject` is set.
    pub tls_has_subject: u32,
    /// Zero.
    pub reserved: u32,
    /// The client certificate's subject, RFC 2253 (UTF-8).
    pub tls_subject: AbiBytes,
    /// The client's certificate chain, leaf first (`codec::encode_byte_list`).
    pub tls_certificates: AbiBytes,
    /// The client's address.
    pub address: AbiAddress,
    /// The listener's name (UTF-8).
    pub listener: AbiBytes,
}

/// Builds a principal: writes its type to the sink's [`PART_VALUE`] and its name to
/// [`PART_SECOND`] and returns [`STATUS_OK`]; or an encoded principal error to [`PART_ERROR`].
pub type BuildPrincipalFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiAuthenticationContext,
    sink: *const AbiSink,
) -> u32;

/// The functions of a [`PluginKind::PrincipalBuilder`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PrincipalBuilderTable {
    /// `size_of::<PrincipalBuilderTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`BuildPrincipalFn`].
    pub build: Option<BuildPrincipalFn>,
}

// ---- Login modules -------------------------------------------------------------------------------

/// Writes the instance's current credential to the sink's [`PART_VALUE`]
/// (`codec::encode_expiring_credential`); returns a `STATUS_*`.
pub type CredentialFn = unsafe extern "C" fn(instance: *const c_void, sink: *const AbiSink) -> u32;

/// `start` answered with a user name ([`PART_VALUE`]) and password ([`PART_SECOND`]) for the
/// host's built-in client.
pub const START_PASSWORD: u32 = 16;
/// `start` answered with an exchange of the plugin's own (written to `exchange`).
pub const START_CUSTOM: u32 = 17;

/// Starts authenticating one upstream connection: returns [`START_PASSWORD`] or [`START_CUSTOM`],
/// or a failure `STATUS_*` with the message in [`PART_ERROR`].
pub type LoginStartFn = unsafe extern "C" fn(
    instance: *const c_void,
    sink: *const AbiSink,
    exchange: *mut *mut c_void,
) -> u32;

/// `client_step` answered with a token in [`PART_VALUE`].
pub const CLIENT_TOKEN: u32 = 16;
/// `client_step` answered that the client has nothing more to send.
pub const CLIENT_DONE: u32 = 17;

/// The client's first token, to [`PART_VALUE`]; returns [`CLIENT_TOKEN`] or a failure.
pub type ClientInitialFn = unsafe extern "C" fn(exchange: *mut c_void, sink: *const AbiSink) -> u32;
/// Answers a server token (borrowed for the call): [`CLIENT_TOKEN`] with the next token,
/// [`CLIENT_DONE`], or a failure.
pub type ClientStepFn =
    unsafe extern "C" fn(exchange: *mut c_void, token: AbiBytes, sink: *const AbiSink) -> u32;
/// Whether the client exchange is complete (1) or not (0).
pub type ClientCompleteFn = unsafe extern "C" fn(exchange: *mut c_void) -> u32;

/// The functions of a [`PluginKind::LoginModule`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct LoginModuleTable {
    /// `size_of::<LoginModuleTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// The SASL mechanism name; see [`NameFn`].
    pub mechanism: Option<NameFn>,
    /// The current credential; see [`CredentialFn`].
    pub credential: Option<CredentialFn>,
    /// Logs in again; see [`CredentialFn`].
    pub refresh: Option<CredentialFn>,
    /// See [`LoginStartFn`].
    pub start: Option<LoginStartFn>,
    /// See [`ClientInitialFn`].
    pub client_initial: Option<ClientInitialFn>,
    /// See [`ClientStepFn`].
    pub client_step: Option<ClientStepFn>,
    /// See [`ClientCompleteFn`].
    pub client_is_complete: Option<ClientCompleteFn>,
    /// Frees a client exchange; see [`FreeFn`].
    pub free_client_exchange: Option<FreeFn>,
}

// ---- Forwarding policies -------------------------------------------------------------------------

/// [`crate::forwarding::RequestInfo`] in C layout, borrowed for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiRequestInfo {
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// Zero.
    pub reserved: u32,
    /// The principal type (UTF-8).
    pub principal_type: AbiBytes,
    /// The principal name (UTF-8).
    pub principal_name: AbiBytes,
}

/// No route written: the host refuses the request.
pub const ROUTE_UNSET: u32 = 0;
/// [`crate::forwarding::Route::Local`].
pub const ROUTE_LOCAL: u32 = 1;
/// [`crate::forwarding::Route::Upstream`] with the service identity.
pub const ROUTE_UPSTREAM: u32 = 2;
/// [`crate::forwarding::Route::Controller`].
pub const ROUTE_CONTROLLER: u32 = 3;
/// [`crate::forwarding::Route::Reject`] with `error_code`.
pub const ROUTE_REJECT: u32 = 4;
/// [`crate::forwarding::Route::Upstream`] with the client's own identity
/// ([`crate::forwarding::UpstreamIdentity::Delegated`]). Added within ABI 2: a host that predates
/// it does not know the value and refuses the request (fails closed); a host that has it refuses
/// it too unless `[forwarding.delegated]` is configured.
pub const ROUTE_UPSTREAM_DELEGATED: u32 = 5;

/// A route in C layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbiRoute {
    /// `ROUTE_*`.
    pub kind: u32,
    /// The Kafka error code of a rejection.
    pub error_code: i32,
}

/// Routes a request: writes `out`, returns a `STATUS_*` (anything else refuses the request).
pub type RouteFn = unsafe extern "C" fn(
    instance: *const c_void,
    request: *const AbiRequestInfo,
    out: *mut AbiRoute,
) -> u32;
/// Whether the policy screens actions (1) or not (0).
pub type ScreensActionsFn = unsafe extern "C" fn(instance: *const c_void) -> u32;
/// Whether one action may go ahead (1) or is refused (anything else, a panic included).
pub type AdmitsFn = unsafe extern "C" fn(
    instance: *const c_void,
    context: *const AbiRequestContext,
    action: *const AbiAction,
) -> u32;

/// The functions of a [`PluginKind::ForwardingPolicy`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ForwardingPolicyTable {
    /// `size_of::<ForwardingPolicyTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// The policy's name; see [`NameFn`].
    pub name: Option<NameFn>,
    /// See [`RouteFn`].
    pub route: Option<RouteFn>,
    /// See [`ScreensActionsFn`].
    pub screens_actions: Option<ScreensActionsFn>,
    /// See [`AdmitsFn`].
    pub admits: Option<AdmitsFn>,
}

// ---- Event subscribers ---------------------------------------------------------------------------

/// Hands one encoded event (`codec::encode_event`, borrowed for the call) to the subscriber;
/// returns a `STATUS_*`.
pub type OnEventFn = unsafe extern "C" fn(instance: *const c_void, event: AbiBytes) -> u32;

/// The functions of a [`PluginKind::EventSubscriber`] plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct EventSubscriberTable {
    /// `size_of::<EventSubscriberTable>()` in the plugin's copy of the API.
    pub table_size: u32,
    /// See [`CreateFn`].
    pub create: Option<CreateFn>,
    /// See [`OnEventFn`].
    pub on_event: Option<OnEventFn>,
}

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
