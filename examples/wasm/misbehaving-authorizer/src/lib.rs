//! An authorizer that misbehaves on purpose, to show the sandbox failing closed. Its
//! `[plugins.config.NAME]` table is `mode = "MODE"`:
//! - `trap`: `authorize` traps (a Rust panic: `unreachable` in a component);
//! - `loop`: `authorize` never returns (only the fuel or the deadline stops it);
//! - `grow`: `authorize` allocates until the memory cap refuses;
//! - `short`: `authorize` answers fewer decisions than actions;
//! - `allow`: everything is allowed (so a test sees the plugin is asked at all);
//! - `clock`: reads the wall and monotonic clocks (WASI), and allows when the time is past 2020;
//! - `random`: draws 32 random bytes (WASI), and allows when they are not all zero;
//! - `describe`: asks the host every fact of the request, logs them on one line through the
//!   host's `log`, and allows (so a test sees what a component is told); in
//!   `authorize-by-resource-type` too.
//!
//! `clock` and `random` reach for the system: they trap unless `[plugins.wasm.NAME] grant`
//! names `clocks` / `random`.
//!
//! It misbehaves only on requests that name a topic outside `ok.*`; other requests (only `ok.*`
//! topics, groups, the cluster) are allowed, so one instance answers some calls and fails others.
use std::cell::RefCell;

use exports::portcullis::plugin::authorizer::{Action, Decision, Guest};
use portcullis::plugin::host::{log, Level};
use portcullis::plugin::request::RequestContext;
use portcullis::plugin::types::{AclOperation, Principal, ResourceType};

wit_bindgen::generate!({ path: "../../../plugins/wasm/wit", world: "authorizer-plugin" });

thread_local! {
    static MODE: RefCell<String> = const { RefCell::new(String::new()) };
}

struct Misbehaving;

impl Guest for Misbehaving {
    fn init(config: String) -> Result<(), String> {
        // `mode = "x"`, parsed by hand to keep the component tiny.
        let mode = config
            .lines()
            .find_map(|line| line.trim().strip_prefix("mode = "))
            .map(|v| v.trim_matches('"').to_owned())
            .ok_or_else(|| "missing field `mode`".to_owned())?;
        if ![
            "trap", "loop", "grow", "short", "allow", "clock", "random", "describe",
        ]
        .contains(&mode.as_str())
        {
            return Err(format!("mode: unknown mode {mode:?}"));
        }
        MODE.with(|m| *m.borrow_mut() = mode);
        Ok(())
    }

    fn authorize(
        principal: Principal,
        context: &RequestContext,
        actions: Vec<Action>,
    ) -> Vec<Decision> {
        let calm = actions
            .iter()
            .all(|a| a.resource_type != ResourceType::Topic || a.resource_name.starts_with("ok."));
        if calm {
            return actions.iter().map(|_| Decision::Allowed).collect();
        }
        match MODE.with(|m| m.borrow().clone()).as_str() {
            "trap" => panic!("misbehaving-authorizer: trap on purpose"),
            "loop" => spin(),
            "grow" => grow(),
            "short" => Vec::new(),
            "clock" => answer(&actions, past_2020()),
            "random" => answer(&actions, random_nonzero()),
            "describe" => {
                log(Level::Info, &describe(&principal, context, &actions));
                answer(&actions, true)
            }
            _ => actions.iter().map(|_| Decision::Allowed).collect(),
        }
    }

    fn authorize_by_resource_type(
        principal: Principal,
        context: &RequestContext,
        _operation: AclOperation,
        _resource_type: ResourceType,
    ) -> Decision {
        if MODE.with(|m| m.borrow().as_str() == "describe") {
            log(Level::Info, &describe(&principal, context, &[]));
        }
        Decision::Allowed
    }
}

fn answer(actions: &[Action], allowed: bool) -> Vec<Decision> {
    let decision = if allowed {
        Decision::Allowed
    } else {
        Decision::Denied
    };
    actions.iter().map(|_| decision).collect()
}

/// Every fact of the request, as `key=value` pairs.
fn describe(principal: &Principal, context: &RequestContext, actions: &[Action]) -> String {
    let principals = |list: Vec<Principal>| {
        list.iter()
            .map(|p| format!("{}:{}", p.kind, p.name))
            .collect::<Vec<_>>()
            .join(",")
    };
    let names: Vec<&str> = actions.iter().map(|a| a.resource_name.as_str()).collect();
    format!(
        "principal={}:{} address={} listener={} api-key={} api-version={} correlation-id={} \
         client-id={:?} groups=[{}] scopes=[{}] jti={:?} actions=[{}]",
        principal.kind,
        principal.name,
        context.client_address(),
        context.listener(),
        context.api_key(),
        context.api_version(),
        context.correlation_id(),
        context.client_id(),
        principals(context.groups()),
        context.scopes().join(","),
        context.jti(),
        names.join(","),
    )
}

/// `wasi:clocks/wall-clock` and `wasi:clocks/monotonic-clock`.
fn past_2020() -> bool {
    let started = std::time::Instant::now();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    now > 1_577_836_800 && started.elapsed().as_secs() < 60
}

/// `wasi:random/random`.
fn random_nonzero() -> bool {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).is_ok() && bytes.iter().any(|b| *b != 0)
}

/// Loops forever without being optimised away.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Allocates 1 MiB at a time and keeps it, until the allocator fails (a trap).
fn grow() -> Vec<Decision> {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        // Reserved, not written: growing memory, not spending fuel on filling it.
        kept.push(std::hint::black_box(Vec::<u8>::with_capacity(1 << 20)));
    }
}

export!(Misbehaving);
