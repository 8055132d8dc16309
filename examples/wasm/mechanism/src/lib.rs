//! `PORTCULLIS-DEMO` of `examples/custom-mechanism`, as a sandboxed component: the client sends
//! one message, `username NUL token`, accepted when the token is the one configured for the user.
//!
//! ```toml
//! [listener]
//! sasl_mechanisms = ["PORTCULLIS-DEMO"]   # the file PORTCULLIS-DEMO.wasm
//!
//! [plugins.config.PORTCULLIS-DEMO]
//! tokens = { alice = "s3cr3t" }
//! ```
use std::collections::BTreeMap;
use std::sync::OnceLock;

use exports::portcullis::plugin::sasl_mechanism::{
    AuthFailure, Authenticated, ExchangeContext, Guest, GuestExchange, StepOutcome,
};
use portcullis::plugin::host::{log, Level};

wit_bindgen::generate!({ path: "../../../plugins/wasm/wit", world: "mechanism-plugin" });

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    tokens: BTreeMap<String, String>,
}

static TOKENS: OnceLock<BTreeMap<String, String>> = OnceLock::new();

struct DemoMechanism;

impl Guest for DemoMechanism {
    type Exchange = DemoExchange;

    fn init(config: String) -> Result<(), String> {
        // The message names the key only: the table holds secrets.
        let config: Config = toml::from_str(&config).map_err(|e| e.message().to_owned())?;
        if config.tokens.is_empty() {
            return Err("tokens: no users configured".to_owned());
        }
        log(
            Level::Debug,
            &format!("{} users configured", config.tokens.len()),
        );
        TOKENS
            .set(config.tokens)
            .map_err(|_| "initialised twice".to_owned())
    }
}

struct DemoExchange;

impl GuestExchange for DemoExchange {
    fn new(_context: ExchangeContext) -> Self {
        DemoExchange
    }

    fn step(&self, message: Vec<u8>) -> StepOutcome {
        let mut parts = message.splitn(2, |&b| b == 0);
        let user = parts.next().and_then(|user| std::str::from_utf8(user).ok());
        let expected = user.and_then(|user| TOKENS.get()?.get(user));
        match (user, expected, parts.next()) {
            (Some(user), Some(expected), Some(token))
                if constant_time_eq(expected.as_bytes(), token) =>
            {
                StepOutcome::Complete(Authenticated {
                    authorization_id: user.to_owned(),
                    server_final: Vec::new(),
                    credential_expiry_ms: None,
                })
            }
            _ => StepOutcome::Fail(AuthFailure::Visible("Invalid username or token".to_owned())),
        }
    }
}

/// Compares without an early exit, so the time taken does not tell how much of a token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

export!(DemoMechanism);
