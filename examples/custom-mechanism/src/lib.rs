//! `PORTCULLIS-DEMO`: a shared-token SASL mechanism, built as a Portcullis native plugin.
//!
//! The client sends one message, `username NUL token`; the plugin accepts it when the token
//! matches the one configured for that user:
//!
//! ```toml
//! [plugins.config.PORTCULLIS-DEMO]
//! tokens = { alice = "s3cr3t" }
//! ```
use std::collections::BTreeMap;
use std::sync::Arc;

use portcullis_plugin_api::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};
use portcullis_plugin_api::secret::{constant_time_eq, Secret};
use portcullis_plugin_api::{Host, Plugin, PluginError};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    tokens: BTreeMap<String, Secret>,
}

pub struct DemoMechanism {
    tokens: Arc<BTreeMap<String, Secret>>,
}

impl Plugin for DemoMechanism {
    const NAME: &'static str = "PORTCULLIS-DEMO";
    type Config = Config;

    fn new(config: Config, host: &Host) -> Result<Self, PluginError> {
        if config.tokens.is_empty() {
            return Err(PluginError::invalid_value("tokens", "no users configured"));
        }
        host.info(format_args!("{} users configured", config.tokens.len()));
        Ok(Self {
            tokens: Arc::new(config.tokens),
        })
    }
}

impl SaslMechanism for DemoMechanism {
    fn name(&self) -> &str {
        "PORTCULLIS-DEMO"
    }
    fn start(&self, _context: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(DemoExchange {
            tokens: Arc::clone(&self.tokens),
        })
    }
}

struct DemoExchange {
    tokens: Arc<BTreeMap<String, Secret>>,
}

impl SaslExchange for DemoExchange {
    fn step(&mut self, message: &[u8]) -> StepOutcome {
        let mut parts = message.splitn(2, |&b| b == 0);
        let user = parts.next().and_then(|user| std::str::from_utf8(user).ok());
        match (user, parts.next()) {
            (Some(user), Some(token))
                if self.tokens.get(user).is_some_and(|expected| {
                    constant_time_eq(expected.expose().as_bytes(), token)
                }) =>
            {
                StepOutcome::Complete(Authenticated::new(user))
            }
            _ => StepOutcome::Fail(AuthFailure::Visible("Invalid username or token".to_owned())),
        }
    }
}

portcullis_plugin_api::export_plugins!(sasl_mechanism: DemoMechanism);
