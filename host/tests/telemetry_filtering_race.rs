//! The way a log line went missing in the gateway (a clean-clone CI run lost "upstream
//! delegation token created"): two threads reach a callsite of a switched-off target for the
//! first time at the same moment. One registers it; the other is told `Interest::sometimes` and
//! asks the subscriber, which says no. With a per-layer filter on the log layer that refusal
//! stayed behind in a thread-local and the thread's next line was dropped
//! (`tests/telemetry_filtering.rs` has the deterministic case). Its own test binary: the
//! subscriber is the process's global one, as in `serve`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an integration test reports a failure by panicking"
)]

mod capture_common;
use capture_common::Captured;

use std::sync::{Arc, Barrier};

use portcullis_host::telemetry::{self, LogFormat, SPAN_TARGET};
use tracing::Level;

/// 256 fresh callsites of the switched-off span target, each first used by two threads at
/// once, each followed by a line: every line is written.
#[test]
fn racing_first_uses_of_a_switched_off_callsite_lose_no_line() {
    macro_rules! four {
        ($($body:tt)*) => {{ $($body)*; $($body)*; $($body)*; $($body)*; }};
    }
    let captured = Captured::default();
    let writer = captured.clone();
    // Telemetry off, how `serve` runs by default.
    let dispatch = telemetry::subscriber(LogFormat::Text, false, move || writer.clone(), None);
    tracing::dispatcher::set_global_default(dispatch).expect("the only subscriber");
    tracing::info!("first line");
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut sent = 0;
                four!(four!(four!(four!({
                    barrier.wait();
                    let _ = tracing::enabled!(target: SPAN_TARGET, Level::INFO);
                    tracing::info!("line after a racing check");
                    sent += 1;
                }))));
                sent
            })
        })
        .collect();
    let sent: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(sent, 512);
    assert_eq!(captured.count("line after a racing check"), sent);
}
