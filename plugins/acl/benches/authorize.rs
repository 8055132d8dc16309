//! `authorize()` and `authorize_by_resource_type()` on the corpora written by
//! `examples/gen_corpus.rs` — the same files the JMH harness feeds Kafka's StandardAuthorizer
//! (`scripts/bench-authorizer.sh` runs both and prints the comparison).
//!
//! Environment: `PORTCULLIS_ACL_CORPUS` (directory, default `target/acl-corpus`),
//! `PORTCULLIS_ACL_CORPORA` (comma-separated file stems, default: every `*.acl`).
//! Only cases named `bench_*` are measured:
//! - `<corpus>/<case>/authorize`: the plugin API, returning `Vec<Authorization>` with the deciding
//!   rule (an owned `AclBinding` when an ACL decides);
//! - `<corpus>/<case>/decide`: the same decision without building the rule (no allocation);
//! - `<corpus>/<case>`: `authorize_by_resource_type`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark harness, not shipped: it reads its corpus files and reports a broken one by panicking"
)]

#[path = "support/mod.rs"]
mod support;

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use portcullis::authorizer::Authorizer;
use portcullis_plugin_acl::corpus::CaseKind;

fn corpora() -> Vec<PathBuf> {
    let dir = std::env::var_os("PORTCULLIS_ACL_CORPUS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/acl-corpus"),
        PathBuf::from,
    );
    let wanted: Option<Vec<String>> = std::env::var("PORTCULLIS_ACL_CORPORA")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "no corpus directory {}: run `cargo run -p portcullis-plugin-acl --example gen_corpus` first",
            dir.display()
        );
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "acl"))
        .filter(|p| {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            wanted.as_ref().is_none_or(|w| w.iter().any(|x| x == stem))
        })
        .collect();
    files.sort();
    files
}

fn bench(c: &mut Criterion) {
    for path in corpora() {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("corpus")
            .to_owned();
        let (authorizer, cases) = support::load(&path);
        eprintln!("{stem}: {} ACLs", authorizer.acl_count());
        let mut group = c.benchmark_group(&stem);
        group
            .sample_size(30)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(2));
        for case in cases.iter().filter(|c| c.name.starts_with("bench_")) {
            let ctx = support::context(case);
            match &case.kind {
                CaseKind::Authorize { .. } => {
                    let actions = [support::action(case).expect("authorize case")];
                    group.bench_function(format!("{}/authorize", case.name), |b| {
                        b.iter(|| {
                            black_box(authorizer.authorize(black_box(&ctx), black_box(&actions)))
                        })
                    });
                    group.bench_function(format!("{}/decide", case.name), |b| {
                        b.iter(|| {
                            black_box(authorizer.decide(black_box(&ctx), black_box(&actions[0])))
                        })
                    });
                }
                CaseKind::ByResourceType {
                    operation,
                    resource_type,
                } => {
                    group.bench_function(case.name.clone(), |b| {
                        b.iter(|| {
                            black_box(authorizer.authorize_by_resource_type(
                                black_box(&ctx),
                                *operation,
                                *resource_type,
                            ))
                        })
                    });
                }
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
