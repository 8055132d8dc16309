//! The C layout of SASL mechanism plugins: the exchange context, a step's result and the
//! mechanism's function table.

use std::ffi::c_void;

use super::common::{AbiAddress, AbiBytes};
#[cfg(doc)]
use super::declaration::PluginKind;
use super::declaration::{CreateFn, NameFn};

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
