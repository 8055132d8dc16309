//! A dynamic principal builder as a [`PrincipalBuilder`]: a failure (an error, a panic, a broken
//! answer) fails that authentication.

use std::sync::Arc;

use portcullis_plugin_api::abi::codec;
use portcullis_plugin_api::abi::sink::Parts;

use super::super::tables::PrincipalFunctions;
use super::super::{AbiAuthenticationContext, AbiBytes, STATUS_OK};
use super::Instance;
use crate::principal::{AuthenticationContext, Principal, PrincipalBuilder, PrincipalError};

/// A principal builder provided by a dynamic plugin.
pub struct DynamicPrincipalBuilder {
    plugin: Arc<str>,
    functions: PrincipalFunctions,
    instance: Instance,
}

impl std::fmt::Debug for DynamicPrincipalBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicPrincipalBuilder")
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

impl DynamicPrincipalBuilder {
    /// Wraps an instance.
    ///
    /// # Safety
    ///
    /// `functions` come from a validated table of a library that is never unloaded, and
    /// `instance` is what its `create` returned.
    pub(crate) unsafe fn new(
        plugin: Arc<str>,
        functions: PrincipalFunctions,
        instance: Instance,
    ) -> Self {
        Self {
            plugin,
            functions,
            instance,
        }
    }

    fn failed(&self, reason: impl std::fmt::Display) -> PrincipalError {
        PrincipalError::Failed {
            reason: format!("principal builder plugin {}: {reason}", self.plugin),
        }
    }
}

impl PrincipalBuilder for DynamicPrincipalBuilder {
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
        let extensions = context
            .sasl
            .map(|sasl| codec::encode_string_map(&sasl.extensions))
            .unwrap_or_default();
        let certificates = context
            .tls
            .map(|tls| codec::encode_byte_list(&tls.certificates))
            .unwrap_or_default();
        let text = |value: Option<&str>| value.map_or(AbiBytes::EMPTY, AbiBytes::from_text);
        let sasl = context.sasl;
        let subject = context.certificate_subject();
        let abi_context = AbiAuthenticationContext {
            has_sasl: u32::from(sasl.is_some()),
            has_tls: u32::from(context.tls.is_some()),
            sasl_mechanism: text(context.mechanism),
            sasl_authorization_id: text(sasl.map(|s| s.authorization_id.as_str())),
            sasl_has_token_id: u32::from(sasl.is_some_and(|s| s.token_id.is_some())),
            sasl_has_credential_expiry: u32::from(
                sasl.is_some_and(|s| s.credential_expiry_ms.is_some()),
            ),
            sasl_token_id: text(sasl.and_then(|s| s.token_id.as_deref())),
            sasl_credential_expiry_ms: sasl.and_then(|s| s.credential_expiry_ms).unwrap_or(0),
            sasl_extensions: AbiBytes::from_slice(&extensions),
            tls_has_subject: u32::from(subject.is_some()),
            reserved: 0,
            tls_subject: text(subject),
            tls_certificates: AbiBytes::from_slice(&certificates),
            address: context.client_address.into(),
            listener: AbiBytes::from_text(context.listener),
        };
        let mut parts = Parts::new();
        let sink = parts.sink();
        // SAFETY: a validated function, our instance, and a context (with every buffer it
        // borrows) and sink that outlive the call.
        let status = unsafe { (self.functions.build)(self.instance.as_ptr(), &abi_context, &sink) };
        if status != STATUS_OK {
            return Err(match parts.error.as_deref() {
                Some(error) => codec::decode_principal_error(error),
                None => self.failed(format!("failed with status {status}")),
            });
        }
        let text = |part: Option<Vec<u8>>| part.and_then(|bytes| String::from_utf8(bytes).ok());
        match (text(parts.value), text(parts.second)) {
            (Some(kind), Some(name)) if !kind.is_empty() && !name.is_empty() => {
                Ok(Principal { kind, name })
            }
            _ => Err(self.failed("returned an empty or malformed principal")),
        }
    }
}
