//! Builds `examples/wasm` for wasm32-wasip2 (once per process; cargo caches it in the target
//! directory) — shared by the sandbox tests and the benchmark.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of the built components (`<crate>.wasm`, crate names with underscores).
pub fn components() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => repo_root().join(dir),
            None => repo_root().join("target"),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(repo_root())
            .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
            .arg("--manifest-path")
            .arg(repo_root().join("examples/wasm/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .status()
            .expect("run cargo build");
        assert!(
            status.success(),
            "building examples/wasm failed (is the target installed? rustup target add wasm32-wasip2)"
        );
        target.join("wasm32-wasip2/release")
    })
}
