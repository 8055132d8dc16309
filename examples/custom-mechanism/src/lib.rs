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

use portcullis::abi::{MechanismPlugin, PluginConfig};
use portcullis::sasl::{
    AuthFailure, Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome,
};
use portcullis::secret::{constant_time_eq, Secret};

pub struct DemoMechanism {
    tokens: Arc<BTreeMap<String, Secret>>,
}

impl MechanismPlugin for DemoMechanism {
    const PLUGIN_NAME: &'static str = "PORTCULLIS-DEMO";

    fn from_config(config: &str) -> Result<Self, String> {
        let config = PluginConfig::parse(config).map_err(|e| e.to_string())?;
        let tokens: BTreeMap<_, _> = config
            .table("tokens")
            .map(|(user, token)| (user.to_owned(), Secret::new(token)))
            .collect();
        if tokens.is_empty() {
            return Err("no users configured: set `tokens = { <user> = \"<token>\" }`".to_owned());
        }
        Ok(Self {
            tokens: Arc::new(tokens),
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

portcullis::export_sasl_mechanism!(DemoMechanism);
