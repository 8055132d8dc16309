//! A deliberately wrong plugin, for the host's refusal tests: a working mechanism whose
//! declaration claims ABI version 2. A host speaking version 1 must refuse it before calling
//! anything in it, with a message that names the file and the version.
use portcullis::abi::MechanismPlugin;
use portcullis::sasl::{AuthFailure, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};

pub struct FutureMechanism;

impl MechanismPlugin for FutureMechanism {
    const PLUGIN_NAME: &'static str = "FUTURE-ABI";
    fn from_config(_config: &str) -> Result<Self, String> {
        Ok(Self)
    }
}

impl SaslMechanism for FutureMechanism {
    fn name(&self) -> &str {
        "X-FUTURE-ABI"
    }
    fn start(&self, _context: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(FutureExchange)
    }
}

struct FutureExchange;

impl SaslExchange for FutureExchange {
    fn step(&mut self, _message: &[u8]) -> StepOutcome {
        StepOutcome::Fail(AuthFailure::Hidden("never reached".to_owned()))
    }
}

// The hidden `@abi_version` form exists only for tests like this one.
portcullis::export_sasl_mechanism!(@abi_version 2, FutureMechanism);
