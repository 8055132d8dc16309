//! Heap allocations per authorized request on the hot path: `authorization::enforce` with the
//! `acl` authorizer, on a producer's Produce and a consumer's Fetch, as the connection runs it
//! (request context built from the session, a tracing subscriber at INFO installed, as
//! `portcullis serve` does by default) — for a session without groups, and for a
//! token-authenticated one allowed only through its group principals (the same budgets).
//!
//! A counting global allocator counts only the allocations of the thread that asked (the test
//! harness runs other tests on other threads). Allocation counts are deterministic, so the
//! budgets below are exact regressions checks, not timings; `cargo test -p
//! portcullis-plugin-acl --test allocations -- --nocapture` prints the figures quoted in
//! docs/benchmarks.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test: a failed encode or a broken invariant should panic"
)]

#[path = "../benches/support/requests.rs"]
mod requests;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use portcullis::audit::{AuditPolicy, AuditSink, AuditingAuthorizer};
use portcullis::authorization::Verdict;
use portcullis::authorizer::Authorizer;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the allocator also runs while thread-locals are being torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            let _ = BYTES.try_with(|b| b.set(b.get() + size as u64));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
// const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
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

/// (allocations, bytes) per call of `f`, averaged over `runs` calls after one warm-up call (the
/// first call registers tracing callsites and thread-local state once per thread).
fn per_call(runs: u64, mut f: impl FnMut()) -> (f64, f64) {
    f();
    ALLOCATIONS.with(|n| n.set(0));
    BYTES.with(|b| b.set(0));
    COUNTING.with(|on| on.set(true));
    for _ in 0..runs {
        f();
    }
    COUNTING.with(|on| on.set(false));
    let n = ALLOCATIONS.with(Cell::get);
    let b = BYTES.with(Cell::get);
    (n as f64 / runs as f64, b as f64 / runs as f64)
}

/// Runs `f` with the subscriber `portcullis serve` installs by default (`RUST_LOG` unset: info).
fn with_production_logging<T>(f: impl FnOnce() -> T) -> T {
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(subscriber, f)
}

struct Case {
    name: &'static str,
    frame: bytes::Bytes,
    /// The most allocations one `enforce` may make (see the module docs).
    budget: f64,
}

fn cases() -> Vec<Case> {
    let one = requests::topics(1);
    let five = requests::topics(5);
    vec![
        Case {
            name: "Produce v12, 1 topic × 1 partition, 16 KiB batch",
            frame: requests::produce(&one, 1, 16 * 1024),
            budget: 0.0,
        },
        Case {
            name: "Produce v12, 5 topics × 3 partitions",
            frame: requests::produce(&five, 3, 16 * 1024),
            budget: 0.0,
        },
        // One: the forwarded frame, a copy with the session fields made sessionless.
        Case {
            name: "Fetch v12, 1 topic × 1 partition",
            frame: requests::fetch(&one, 1),
            budget: 1.0,
        },
        Case {
            name: "Fetch v12, 5 topics × 3 partitions",
            frame: requests::fetch(&five, 3),
            budget: 1.0,
        },
    ]
}

/// An audit sink that drops its lines (none are written for allowed decisions by default).
struct Discard;

impl AuditSink for Discard {
    fn write_line(&self, _line: String) {}
}

#[test]
fn enforce_allocations_per_request() {
    let plain = requests::authorizer();
    // `[audit]` configured with its defaults (denials only), as `portcullis serve` wraps it.
    let audited: Arc<dyn Authorizer> = Arc::new(AuditingAuthorizer::new(
        Arc::clone(&plain),
        Arc::new(Discard),
        AuditPolicy::new(false, true),
    ));
    let sessions = [
        ("", requests::session()),
        (", groups", requests::group_session()),
    ];
    let mut over = Vec::new();
    with_production_logging(|| {
        for (setup, authorizer) in [("acl", &plain), ("acl + [audit]", &audited)] {
            for ((kind, session), case) in sessions
                .iter()
                .flat_map(|s| cases().into_iter().map(move |c| (s, c)))
            {
                let setup = format!("{setup}{kind}");
                let header = requests::parse(&case.frame);
                let verdict = requests::authorize(authorizer, session, &header, &case.frame);
                assert!(
                    matches!(verdict, Verdict::Forward { .. }),
                    "{}: {verdict:?}",
                    case.name
                );
                let (allocations, bytes) = per_call(200, || {
                    std::hint::black_box(requests::authorize(
                        authorizer,
                        session,
                        &header,
                        &case.frame,
                    ));
                });
                let (header_allocations, _) = per_call(200, || {
                    std::hint::black_box(requests::parse(&case.frame));
                });
                println!(
                    "{setup:<22} {:<50} enforce: {allocations:>5.1} allocations, {bytes:>7.0} bytes; header parse: {header_allocations:.1}",
                    case.name
                );
                if allocations > case.budget {
                    over.push(format!(
                        "{setup}, {}: {allocations} > {}",
                        case.name, case.budget
                    ));
                }
            }
        }
    });
    assert!(over.is_empty(), "over budget: {over:?}");
}

/// The steady state of a consumer with a fetch session (KIP-227): incremental fetches in an open
/// session, which Portcullis forwards as they are after re-checking READ on the session's topics.
/// Nothing is allocated (no copy of the frame, no response plan).
#[test]
fn incremental_fetch_allocations() {
    const RUNS: i32 = 200;
    let plain = requests::authorizer();
    let audited: Arc<dyn Authorizer> = Arc::new(AuditingAuthorizer::new(
        Arc::clone(&plain),
        Arc::new(Discard),
        AuditPolicy::new(false, true),
    ));
    let mut over = Vec::new();
    with_production_logging(|| {
        for (setup, authorizer, kind, session) in [
            ("acl", &plain, "", requests::session()),
            ("acl", &plain, ", groups", requests::group_session()),
            ("acl + [audit]", &audited, "", requests::session()),
            (
                "acl + [audit]",
                &audited,
                ", groups",
                requests::group_session(),
            ),
        ] {
            for (name, topics, listed) in [
                ("1 topic × 1 partition, none listed", 1, 0),
                ("5 topics × 3 partitions, all listed", 5, 3),
            ] {
                let names = requests::topics(topics);
                let sessions = requests::fetch_session(authorizer, &session, &names, 3);
                // One frame per epoch, built before counting.
                let frames: Vec<_> = (1..=RUNS + 1)
                    .map(|epoch| {
                        let listed_names = if listed > 0 { &names[..] } else { &[] };
                        requests::fetch_in(listed_names, listed, requests::SESSION_ID, epoch)
                    })
                    .collect();
                let headers: Vec<_> = frames.iter().map(requests::parse).collect();
                let mut next = 0usize;
                let (allocations, bytes) = per_call(RUNS as u64, || {
                    let verdict = requests::authorize_in(
                        authorizer,
                        &session,
                        &headers[next],
                        &frames[next],
                        &sessions,
                    );
                    assert!(
                        matches!(&verdict, Verdict::Forward { frame, plan } if frame == &frames[next] && plan.is_unchanged()),
                        "{name}: {verdict:?}"
                    );
                    next += 1;
                });
                let setup = format!("{setup}{kind}");
                println!(
                    "{setup:<22} Fetch v12 incremental, {name:<38} enforce: {allocations:>5.1} allocations, {bytes:>7.0} bytes"
                );
                if allocations > 0.0 {
                    over.push(format!("{setup}, {name}: {allocations} > 0"));
                }
            }
        }
    });
    assert!(over.is_empty(), "over budget: {over:?}");
}
