//! Records which compiler built the plugin API, so that a dynamic plugin's declaration can carry it
//! (`portcullis_plugin_api::abi::RUSTC_VERSION`). With the pure C function tables a mismatch is only
//! reported as a warning, so "unknown" is an acceptable fallback when `$RUSTC -vV` cannot be run.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    #[allow(
        clippy::disallowed_methods,
        reason = "a build script runs at compile time, not in the sans-I/O plugin API"
    )]
    let description = Command::new(&rustc)
        .arg("-vV")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| describe(&text))
        .unwrap_or_else(|| "unknown".to_owned());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown-target".to_owned());
    println!("cargo:rustc-env=PORTCULLIS_RUSTC_VERSION={description} [{target}]");
}

/// `rustc 1.95.0 (59807616e 2026-04-14)` — the first line of `rustc -vV`.
fn describe(verbose_version: &str) -> Option<String> {
    let first = verbose_version.lines().next()?.trim();
    first.starts_with("rustc ").then(|| first.to_owned())
}
