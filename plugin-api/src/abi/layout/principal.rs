//! The C layout of principal builder plugins: the authentication context and the builder's
//! function table.

use std::ffi::c_void;

use super::common::{AbiAddress, AbiBytes, AbiSink};
#[cfg(doc)]
use super::common::{PART_ERROR, PART_SECOND, PART_VALUE, STATUS_OK};
use super::declaration::CreateFn;
#[cfg(doc)]
use super::declaration::PluginKind;

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
