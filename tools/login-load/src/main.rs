//! `portcullis-login-load`: measures how many full Kafka SASL logins a listener completes.
//!
//! One login is what a fresh Kafka client does before its first real request: TCP connect →
//! ApiVersions v3 → SaslHandshake v1 → one (PLAIN) or two (SCRAM) SaslAuthenticate rounds, the
//! SCRAM server signature verified → close. `--connections` workers run logins back to back until
//! `--duration` has passed or `--logins` logins were measured, whichever comes first; every login
//! has its own `--timeout-ms`, so the tool always stops by itself.
//!
//! The SCRAM client salts the password with PBKDF2 (4096 iterations or more) once per salt and
//! iteration count and reuses the result
//! ([`SaltedPasswordCache`](portcullis_plugin_scram::SaltedPasswordCache)); otherwise the tool
//! would mostly measure its own PBKDF2 rather than the server.
//!
//! A benchmark tool, not part of the shipped `portcullis-host`: `scripts/bench.sh` builds and
//! runs it (docs/benchmarks.md).
#![forbid(unsafe_code)]

mod args;
mod login;
mod mechanisms;
mod report;
mod runner;
mod wire;

#[cfg(test)]
mod tests;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

fn main() -> ExitCode {
    let args = args::Args::parse();
    let plan = match args.plan() {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("portcullis-login-load: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match runner::build_runtime(plan.threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portcullis-login-load: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = Arc::new(plan);
    let cpu_before = report::process_cpu_seconds();
    let outcome = runtime.block_on(runner::run(Arc::clone(&plan)));
    let cpu_after = report::process_cpu_seconds();
    let summary = report::Summary::new(
        &plan,
        outcome,
        cpu_before.zip(cpu_after).map(|(b, a)| a - b),
    );
    if plan.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("portcullis-login-load: cannot write JSON: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", summary.render_text());
    }
    // A benchmark with failures or without a single login is not a result to quote.
    if summary.failures_total > 0 || summary.logins == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
