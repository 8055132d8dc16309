//! The C layout of login module plugins (the client side of SASL): credentials, client
//! exchanges and the login module's function table.

use std::ffi::c_void;

use super::common::{AbiBytes, AbiSink};
#[cfg(doc)]
use super::common::{PART_ERROR, PART_SECOND, PART_VALUE};
#[cfg(doc)]
use super::declaration::PluginKind;
use super::declaration::{CreateFn, NameFn};
use super::sasl::FreeFn;

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
