//! `portcullis:plugin/sasl-mechanism` as a [`SaslMechanism`]: each exchange is an `exchange`
//! resource of the component, living in one pooled instance that the exchange holds until it
//! completes or fails (exchanges never share an instance, so a trap in one fails only that
//! authentication). A trap, the fuel or the memory cap fail the authentication with a hidden
//! reason: the client gets Kafka's SASL_AUTHENTICATION_FAILED and its generic message.

use std::path::Path;
use std::sync::Arc;

use portcullis_plugin_api::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};
use wasmtime::component::{Component, ResourceAny};

use crate::bindings::mechanism::exports::portcullis::plugin::sasl_mechanism as wit;
use crate::bindings::mechanism::{MechanismPlugin, MechanismPluginPre};
use crate::engine::WasmRuntime;
use crate::error::{FailureKind, WasmError};
use crate::pool::{world_pre, Failed, Pool, Setup, Slot};

world_pre!(
    MechanismPre,
    "mechanism-plugin",
    MechanismPluginPre,
    MechanismPlugin,
    crate::WasmKind::SaslMechanism,
    portcullis_plugin_sasl_mechanism
);

/// A component SASL mechanism; its name is the plugin's.
pub(crate) struct WasmMechanism {
    pool: Arc<Pool<MechanismPre>>,
}

impl WasmMechanism {
    pub(crate) fn new(
        runtime: &WasmRuntime,
        path: &Path,
        component: &Component,
        setup: Setup,
    ) -> Result<Self, WasmError> {
        let pool = MechanismPre::pool(runtime, path, component, setup)?;
        Ok(Self {
            pool: Arc::new(pool),
        })
    }
}

impl SaslMechanism for WasmMechanism {
    fn name(&self) -> &str {
        self.pool.name()
    }

    fn start(&self, context: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(WasmExchange::start(Arc::clone(&self.pool), context))
    }
}

/// One authentication: the instance it holds and its `exchange` resource, or why it failed.
struct WasmExchange {
    pool: Arc<Pool<MechanismPre>>,
    live: Result<(Slot<MechanismPlugin>, ResourceAny), Failed>,
}

impl WasmExchange {
    fn start(pool: Arc<Pool<MechanismPre>>, context: &ExchangeContext) -> Self {
        let live = Self::construct(&pool, context);
        Self { pool, live }
    }

    fn construct(
        pool: &Pool<MechanismPre>,
        context: &ExchangeContext,
    ) -> Result<(Slot<MechanismPlugin>, ResourceAny), Failed> {
        let mut slot = pool.take()?;
        pool.arm(&mut slot)?;
        let wit_context = wit::ExchangeContext {
            client_address: context.client_address.to_string(),
            listener: context.listener.clone(),
            now_ms: context.now_ms,
        };
        let created = slot
            .bindings
            .portcullis_plugin_sasl_mechanism()
            .exchange()
            .call_constructor(&mut slot.store, &wit_context);
        match created {
            Ok(handle) => Ok((slot, handle)),
            Err(error) => Err(pool.failed(&slot.store, "starting an exchange", &error)),
        }
    }

    fn failure(&self, kind: FailureKind) -> StepOutcome {
        StepOutcome::Fail(AuthFailure::Hidden(format!(
            "wasm plugin {} failed closed: {kind}",
            self.pool.name()
        )))
    }

    /// Drops the exchange resource in the component and returns the instance to the pool.
    fn finish(pool: &Pool<MechanismPre>, mut slot: Slot<MechanismPlugin>, handle: ResourceAny) {
        if pool.arm(&mut slot).is_err() {
            return;
        }
        match handle.resource_drop(&mut slot.store) {
            Ok(()) => pool.give_back(slot),
            Err(error) => {
                pool.failed(&slot.store, "ending an exchange", &error);
            }
        }
    }
}

impl SaslExchange for WasmExchange {
    fn step(&mut self, client_token: &[u8]) -> StepOutcome {
        let (mut slot, handle) =
            match std::mem::replace(&mut self.live, Err(Failed(FailureKind::BadAnswer))) {
                Ok(live) => live,
                Err(Failed(kind)) => {
                    self.live = Err(Failed(kind));
                    return self.failure(kind);
                }
            };
        if let Err(Failed(kind)) = self.pool.arm(&mut slot) {
            self.live = Err(Failed(kind));
            return self.failure(kind);
        }
        let stepped = slot
            .bindings
            .portcullis_plugin_sasl_mechanism()
            .exchange()
            .call_step(&mut slot.store, handle, client_token);
        match stepped {
            Ok(wit::StepOutcome::Continue(challenge)) => {
                self.live = Ok((slot, handle));
                StepOutcome::Continue(challenge)
            }
            Ok(finished) => {
                // Finished: the instance goes back now; a later step is refused.
                self.live = Err(Failed(FailureKind::BadAnswer));
                Self::finish(&self.pool, slot, handle);
                match finished {
                    wit::StepOutcome::Complete(done) => StepOutcome::Complete(
                        Authenticated::new(done.authorization_id)
                            .with_server_final(done.server_final)
                            .with_credential_expiry_ms(done.credential_expiry_ms),
                    ),
                    wit::StepOutcome::Fail(wit::AuthFailure::Visible(m)) => {
                        StepOutcome::Fail(AuthFailure::Visible(m))
                    }
                    wit::StepOutcome::Fail(wit::AuthFailure::Hidden(m)) => {
                        StepOutcome::Fail(AuthFailure::Hidden(m))
                    }
                    wit::StepOutcome::Continue(_) => self.failure(FailureKind::BadAnswer),
                }
            }
            Err(error) => {
                let Failed(kind) = self
                    .pool
                    .failed(&slot.store, "stepping an exchange", &error);
                self.live = Err(Failed(kind));
                self.failure(kind)
            }
        }
    }
}

impl Drop for WasmExchange {
    fn drop(&mut self) {
        // An exchange abandoned mid-way (the client left): free its resource, keep the instance.
        if let Ok((slot, handle)) =
            std::mem::replace(&mut self.live, Err(Failed(FailureKind::BadAnswer)))
        {
            Self::finish(&self.pool, slot, handle);
        }
    }
}
