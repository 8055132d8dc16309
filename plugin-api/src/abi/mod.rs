//! The C ABI between the host and dynamic plugins.

/// The compiler that built this copy of the plugin API, e.g.
/// `rustc 1.95.0 (59807616e 2026-04-14) [x86_64-unknown-linux-gnu]`, or `unknown [..]`.
pub const RUSTC_VERSION: &str = env!("PORTCULLIS_RUSTC_VERSION");
