//! One request through `authorization::enforce` with the `acl` authorizer, as the connection
//! runs it: request context from the session, a tracing subscriber at INFO installed (the default
//! of `portcullis serve`), a producer's Produce and a consumer's Fetch (`support/requests.rs`).
//!
//! `cargo bench -p portcullis-plugin-acl --bench enforce`; the per-request allocation counts of
//! the same requests come from `tests/allocations.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark harness, not shipped: it builds its requests and fails loudly if they do not encode"
)]

#[path = "support/requests.rs"]
mod requests;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let authorizer = requests::authorizer();
    let session = requests::session();
    let one = requests::topics(1);
    let five = requests::topics(5);
    let cases = [
        ("produce/1x1", requests::produce(&one, 1, 16 * 1024)),
        ("produce/5x3", requests::produce(&five, 3, 16 * 1024)),
        ("fetch/1x1", requests::fetch(&one, 1)),
        ("fetch/5x3", requests::fetch(&five, 3)),
    ];
    let mut group = c.benchmark_group("enforce");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, frame) in &cases {
        let header = requests::parse(frame);
        group.bench_function(*name, |b| {
            b.iter(|| {
                black_box(requests::authorize(
                    black_box(&authorizer),
                    &session,
                    &header,
                    black_box(frame),
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
