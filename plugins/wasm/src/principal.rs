//! `portcullis:plugin/principal-builder` as a [`PrincipalBuilder`]: the authentication context
//! becomes a WIT record, the component answers a principal or why it has none. A trap, the fuel
//! or the memory cap fail that authentication (`PrincipalError::Failed`), like the C ABI's
//! adapter; a principal with an empty type or name is a bad answer and fails it too.

use std::path::Path;

use portcullis_plugin_api::principal::{
    AuthenticationContext, Principal, PrincipalBuilder, PrincipalError,
};
use wasmtime::component::Component;

use crate::bindings::principal::exports::portcullis::plugin::principal_builder as wit;
use crate::bindings::principal::{PrincipalBuilderPlugin, PrincipalBuilderPluginPre};
use crate::engine::WasmRuntime;
use crate::error::{FailureKind, WasmError};
use crate::pool::{world_pre, Pool, Setup};

world_pre!(
    PrincipalPre,
    "principal-builder-plugin",
    PrincipalBuilderPluginPre,
    PrincipalBuilderPlugin,
    crate::WasmKind::PrincipalBuilder,
    portcullis_plugin_principal_builder
);

/// A component principal builder.
pub(crate) struct WasmPrincipalBuilder {
    pool: Pool<PrincipalPre>,
}

impl WasmPrincipalBuilder {
    pub(crate) fn new(
        runtime: &WasmRuntime,
        path: &Path,
        component: &Component,
        setup: Setup,
    ) -> Result<Self, WasmError> {
        let pool = PrincipalPre::pool(runtime, path, component, setup)?;
        Ok(Self { pool })
    }

    fn failed(&self, why: &str) -> PrincipalError {
        PrincipalError::Failed {
            reason: format!("principal builder plugin {}: {why}", self.pool.name()),
        }
    }
}

impl PrincipalBuilder for WasmPrincipalBuilder {
    fn build(&self, context: &AuthenticationContext<'_>) -> Result<Principal, PrincipalError> {
        let wit_context = authentication_context(context);
        let answer = self.pool.call("building a principal", |bindings, store| {
            bindings
                .portcullis_plugin_principal_builder()
                .call_build(store, &wit_context)
        });
        match answer {
            Ok(Ok(principal)) if !principal.kind.is_empty() && !principal.name.is_empty() => {
                Ok(Principal {
                    kind: principal.kind,
                    name: principal.name,
                })
            }
            Ok(Ok(_)) => {
                let what = "building a principal";
                self.pool.report(
                    FailureKind::BadAnswer,
                    what,
                    "a principal with an empty part",
                );
                Err(self.failed("answered a principal with an empty type or name"))
            }
            Ok(Err(wit::BuildError::NoRuleApplies(name))) => {
                Err(PrincipalError::NoRuleApplies { name })
            }
            Ok(Err(wit::BuildError::Unavailable(reason))) => {
                Err(PrincipalError::Unavailable { reason })
            }
            Err(failed) => Err(self.failed(&format!("failed closed ({})", failed.0))),
        }
    }
}

fn authentication_context(context: &AuthenticationContext<'_>) -> wit::AuthenticationContext {
    let sasl = context.sasl;
    wit::AuthenticationContext {
        mechanism: context.mechanism.map(str::to_owned),
        authorization_id: sasl.map(|s| s.authorization_id.clone()),
        token_id: sasl.and_then(|s| s.token_id.clone()),
        credential_expiry_ms: sasl.and_then(|s| s.credential_expiry_ms),
        extensions: sasl
            .map(|s| {
                s.extensions
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        tls: context.tls.is_some(),
        certificate_subject: context.certificate_subject().map(str::to_owned),
        client_address: context.client_address.to_string(),
        listener: context.listener.to_owned(),
    }
}
