//! A plugin that panics on purpose, for the host's tests that a panic inside a plugin never
//! crosses the library boundary. Its configuration picks where it panics:
//! `panic_in = "create"` (in `from_config`), `"start"`, or `"step"` (the default; the exchange
//! panics when the client sends `panic!` and fails visibly otherwise).
//!
//! Its panics are deliberate and caught by the export wrapper, so they print one line each, never
//! a backtrace (even with `RUST_BACKTRACE=1`): a passing test run should not look like a failing
//! one. The library has its own copy of std, hence its own panic hook, so the quiet hook installed
//! here only ever applies to this plugin's panics.
#![allow(
    clippy::panic,
    reason = "this plugin exists to panic, for the host's containment tests"
)]

use std::sync::Once;

use portcullis::abi::{MechanismPlugin, PluginConfig};
use portcullis::sasl::{AuthFailure, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};

/// Replaces this library's panic hook with one line per (deliberate) panic.
fn quiet_panics() {
    static QUIET: Once = Once::new();
    QUIET.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            eprintln!("panicking-plugin: deliberate panic at {location} (the host must catch it)");
        }));
    });
}

pub struct PanickingMechanism {
    panic_in_start: bool,
}

impl MechanismPlugin for PanickingMechanism {
    const PLUGIN_NAME: &'static str = "X-PANIC";
    fn from_config(config: &str) -> Result<Self, String> {
        quiet_panics();
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
