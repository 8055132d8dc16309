//! A plugin that panics on purpose, for the host's tests that a panic inside a plugin never
//! crosses the library boundary. Its configuration picks where it panics:
//! `panic_in = "create"` (in `from_config`), `"start"`, or `"step"` (the default; the exchange
//! panics when the client sends `panic!` and fails visibly otherwise).
#![allow(
    clippy::panic,
    reason = "this plugin exists to panic, for the host's containment tests"
)]

use portcullis::abi::{MechanismPlugin, PluginConfig};
use portcullis::sasl::{AuthFailure, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};

pub struct PanickingMechanism {
    panic_in_start: bool,
}

impl MechanismPlugin for PanickingMechanism {
    const PLUGIN_NAME: &'static str = "X-PANIC";
    fn from_config(config: &str) -> Result<Self, String> {
        let config = PluginConfig::parse(config).map_err(|e| e.to_string())?;
        match config.get("panic_in").unwrap_or("step") {
            "create" => panic!("test hook: panic in from_config"),
            "start" => Ok(Self {
                panic_in_start: true,
            }),
            "step" => Ok(Self {
                panic_in_start: false,
            }),
            other => Err(format!("unknown panic_in {other:?}")),
        }
    }
}

impl SaslMechanism for PanickingMechanism {
    fn name(&self) -> &str {
        "X-PANIC"
    }
    fn start(&self, _context: &ExchangeContext) -> Box<dyn SaslExchange> {
        if self.panic_in_start {
            panic!("test hook: panic in start");
        }
        Box::new(PanickingExchange)
    }
}

struct PanickingExchange;

impl SaslExchange for PanickingExchange {
    fn step(&mut self, message: &[u8]) -> StepOutcome {
        if message == b"panic!" {
            panic!("test hook: panic in step");
        }
        StepOutcome::Fail(AuthFailure::Visible("send `panic!`".to_owned()))
    }
}

portcullis::export_sasl_mechanism!(PanickingMechanism);
