//! The framework's own work per forwarded request: `Connection::handle_frame` on an authenticated
//! connection, from the frame the host read to the `Action::Forward` it carries out, for a
//! producer's Produce (one topic, one partition, a 16 KiB record batch as opaque bytes, acks=1)
//! and a consumer's sessionless Fetch (one topic, one partition) — each without an authorizer and
//! with one that allows everything (`FixedDecision(Decision::Allowed)`), so the difference is the
//! authorization layer itself, not an ACL lookup. Prints the heap allocations per call first
//! (a counting global allocator), then runs criterion.
//!
//! `cargo bench -p portcullis --bench handle_frame`
#![allow(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a benchmark harness, not shipped: it builds its requests and fails loudly if they do not encode"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, ProduceRequest, RequestHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use portcullis::authorization::restrict_versions;
use portcullis::authorizer::{Authorizer, Decision, FixedDecision};
use portcullis::connection::{Action, Connection, ConnectionConfig, NodeServices};
use portcullis::events::EventBus;
use portcullis::principal::DefaultPrincipalBuilder;
use portcullis::protocol::versions::ApiVersionTable;
use portcullis::sasl::{Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};
use portcullis_plugin_forwarding::Passthrough;

/// Heap allocations (`alloc`, `alloc_zeroed` through the default, `realloc`) since start. The
/// counting runs before criterion starts, on the only thread, so one global counter suffices.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; counting is one atomic add,
// which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The time every request is handed over at: a session without expiry never runs out.
const NOW_MS: i64 = 1_000;

/// A one-step mechanism that authenticates any token as `bench`: only the state it leaves
/// behind matters here, not the exchange.
struct AnyToken;
struct AnyTokenExchange;

impl SaslMechanism for AnyToken {
    fn name(&self) -> &str {
        "BENCH"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(AnyTokenExchange)
    }
}

impl SaslExchange for AnyTokenExchange {
    fn step(&mut self, _token: &[u8]) -> StepOutcome {
        StepOutcome::Complete(Authenticated::new("bench"))
    }
}

/// What an Apache Kafka 4.x broker supports (Produce 3–12, Fetch 4–17); the framework clamps it
/// to what it advertises.
fn upstream_versions() -> ApiVersionTable {
    ApiVersionTable::from_ranges([
        (ApiKey::Produce as i16, 3, 12),
        (ApiKey::Fetch as i16, 4, 17),
    ])
}

/// An authenticated connection: a real SaslHandshake v1 and SaslAuthenticate v2 went through
/// `handle_frame`, as a client sends them. With an authorizer the listener advertises only the
/// versions it can authorize, as a host must.
fn authenticated(authorizer: Option<Arc<dyn Authorizer>>) -> Connection {
    let advertised = ApiVersionTable::advertised(&upstream_versions());
    let versions = match authorizer {
        Some(_) => restrict_versions(&advertised),
        None => advertised,
    };
    let services = NodeServices::new(
        vec![Arc::new(AnyToken)],
        Arc::new(DefaultPrincipalBuilder),
        // The default policy (`passthrough`): Produce and Fetch go upstream as the service.
        Arc::new(Passthrough::default()),
        EventBus::new(),
    )
    .with_authorizer(authorizer);
    let config = ConnectionConfig::new(
        "bench",
        Arc::new(services),
        Arc::new(ArcSwap::from_pointee(versions)),
    );
    let mut conn = Connection::new(Arc::new(config), IpAddr::from([127, 0, 0, 1]), false);
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("BENCH"));
    let _ = conn.handle_frame(request(ApiKey::SaslHandshake, 1, &handshake), 0);
    let token = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"any"));
    let _ = conn.handle_frame(request(ApiKey::SaslAuthenticate, 2, &token), 0);
    assert!(
        conn.is_authenticated(),
        "the bench connection did not authenticate"
    );
    conn
}

/// A request frame (header and body, without the size prefix), as the host hands it over.
fn request<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("bench-client")))
        .encode(&mut out, key.request_header_version(version))
        .expect("header");
    body.encode(&mut out, version).expect("body");
    out.freeze()
}

/// A magic-2 record batch of `len` bytes: only the length and magic are set, which is all the
/// framework reads (the authorizer path walks batches looking for the transactional flag).
fn batch(len: usize) -> Bytes {
    let mut b = vec![0u8; len];
    let batch_length = i32::try_from(len - 12).expect("batch length");
    b[8..12].copy_from_slice(&batch_length.to_be_bytes());
    b[16] = 2;
    Bytes::from(b)
}

fn produce(version: i16) -> Bytes {
    let body = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(16 * 1024)))])]);
    request(ApiKey::Produce, version, &body)
}

/// Sessionless (session id 0, epoch -1): an opening fetch (epoch 0) would record a pending
/// session on every call that no response ever settles, so the state would grow across
/// iterations.
fn fetch(version: i16) -> Bytes {
    let body = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(123_456)
                .with_partition_max_bytes(1 << 20)])]);
    request(ApiKey::Fetch, version, &body)
}

/// The newest version of `key` advertised both with and without an authorizer, so the two runs
/// of a request differ only by the authorizer (Fetch: v12, the last that names topics).
fn version(key: ApiKey) -> i16 {
    restrict_versions(&ApiVersionTable::advertised(&upstream_versions()))
        .range(key as i16)
        .expect("advertised")
        .1
}

/// Allocations of one `handle_frame` call, averaged over many after a warm-up call (the first
/// promotes the frame's `Bytes` to shared and fills any lazy state). The frame is cloned and the
/// returned actions dropped outside the counted span.
fn allocations_per_call(conn: &mut Connection, frame: &Bytes) -> f64 {
    const RUNS: u32 = 1_000;
    drop(conn.handle_frame(frame.clone(), NOW_MS));
    let mut total = 0;
    for _ in 0..RUNS {
        let frame = frame.clone();
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let actions = conn.handle_frame(frame, NOW_MS);
        total += ALLOCATIONS.load(Ordering::Relaxed) - before;
        drop(black_box(actions));
    }
    total as f64 / f64::from(RUNS)
}

fn bench(c: &mut Criterion) {
    let (produce_version, fetch_version) = (version(ApiKey::Produce), version(ApiKey::Fetch));
    println!("versions: Produce v{produce_version}, Fetch v{fetch_version}");
    let requests = [
        ("produce", produce(produce_version)),
        ("fetch", fetch(fetch_version)),
    ];
    let allow_all: Arc<dyn Authorizer> = Arc::new(FixedDecision(Decision::Allowed));
    let authorizers = [("none", None), ("allow-all", Some(allow_all))];

    // Every case checked and counted before any timing, so the figures print together.
    let mut cases = Vec::new();
    for (request_name, frame) in &requests {
        for (authorizer_name, authorizer) in &authorizers {
            let name = format!("{request_name}/{authorizer_name}");
            let mut conn = authenticated(authorizer.clone());
            // Once, outside the timed loop: the bench must measure the forwarding path, not an
            // error or a local answer.
            let actions = conn.handle_frame(frame.clone(), NOW_MS);
            assert!(
                matches!(actions.as_slice(), [Action::Forward(f)] if f.expects_response),
                "{name}: expected one Action::Forward, got {actions:?}"
            );
            let allocations = allocations_per_call(&mut conn, frame);
            println!("allocations per handle_frame: {name} = {allocations}");
            cases.push((name, conn, frame));
        }
    }

    let mut group = c.benchmark_group("handle_frame");
    for (name, mut conn, frame) in cases {
        group.bench_function(&name, |b| {
            b.iter(|| conn.handle_frame(black_box(frame.clone()), black_box(NOW_MS)))
        });
        // A connection that had failed would have timed its close instead of the forward.
        assert!(
            conn.is_authenticated(),
            "{name}: the connection failed while timed"
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
