//! A SASL mechanism that misbehaves on purpose in `step`, to show the sandbox failing closed.
//! `[plugins.config.NAME]` is `mode = "trap" | "loop" | "grow"`; a client token starting with
//! `ok` completes as user `ok` instead, so one instance can succeed and fail.
use std::cell::RefCell;

use exports::portcullis::plugin::sasl_mechanism::{
    Authenticated, ExchangeContext, Guest, GuestExchange, StepOutcome,
};

wit_bindgen::generate!({ path: "../../../plugins/wasm/wit", world: "mechanism-plugin" });

thread_local! {
    static MODE: RefCell<String> = const { RefCell::new(String::new()) };
}

struct Misbehaving;

impl Guest for Misbehaving {
    type Exchange = Exchange;

    fn init(config: String) -> Result<(), String> {
        let mode = config
            .lines()
            .find_map(|line| line.trim().strip_prefix("mode = "))
            .map(|v| v.trim_matches('"').to_owned())
            .ok_or_else(|| "missing field `mode`".to_owned())?;
        MODE.with(|m| *m.borrow_mut() = mode);
        Ok(())
    }
}

struct Exchange;

impl GuestExchange for Exchange {
    fn new(_context: ExchangeContext) -> Self {
        Exchange
    }

    fn step(&self, token: Vec<u8>) -> StepOutcome {
        if token.starts_with(b"ok") {
            return StepOutcome::Complete(Authenticated {
                authorization_id: "ok".to_owned(),
                server_final: Vec::new(),
                credential_expiry_ms: None,
            });
        }
        match MODE.with(|m| m.borrow().clone()).as_str() {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "grow" => {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                loop {
                    // Reserved, not written: growing memory, not spending fuel on filling it.
                    kept.push(std::hint::black_box(Vec::<u8>::with_capacity(1 << 20)));
                }
            }
            _ => panic!("misbehaving-mechanism: trap on purpose"),
        }
    }
}

export!(Misbehaving);
