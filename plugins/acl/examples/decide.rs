//! Prints `<case>\t<ALLOWED|DENIED>` for every case of a corpus, to diff against Kafka's
//! StandardAuthorizer on the same file (`scripts/bench-authorizer.sh` does).
//!
//! `cargo run -p portcullis-plugin-acl --example decide -- <corpus.acl>`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark tool, not shipped: it reads a corpus file and reports a broken one by panicking"
)]

#[path = "../benches/support/mod.rs"]
mod support;

use portcullis::authorizer::Decision;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: decide <corpus.acl>");
        std::process::exit(2);
    };
    let (authorizer, cases) = support::load(path.as_ref());
    for case in &cases {
        let decision = match support::decide(&authorizer, case) {
            Decision::Allowed => "ALLOWED",
            _ => "DENIED",
        };
        println!("{}\t{decision}", case.name);
    }
}
