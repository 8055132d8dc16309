//! Measures what an authenticated session costs the framework: N connections are driven through
//! ApiVersions, SaslHandshake and SaslAuthenticate with a one-round test mechanism, registered
//! with the ReauthScheduler, and kept alive. Prints the resident memory per session and the CPU
//! used while the sessions sit idle (there is no timer or task per session, so it should be ~0).
//!
//! `cargo run --release -p portcullis --example session_footprint -- 100000`
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a measurement tool, not shipped: it reads /proc and the clock to measure the framework"
)]

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::{BufMut, Bytes, BytesMut};
use portcullis::connection::{Connection, ConnectionConfig, NodeServices};
use portcullis::events::EventBus;
use portcullis::forwarding::{ForwardingPolicy, RequestInfo, Route, UpstreamIdentity};
use portcullis::metrics::SecurityMetrics;
use portcullis::principal::DefaultPrincipalBuilder;
use portcullis::protocol::versions::ApiVersionTable;
use portcullis::reauth::ReauthScheduler;
use portcullis::sasl::{Authenticated, ExchangeContext, SaslExchange, SaslMechanism, StepOutcome};

struct OneRound;
struct OneRoundExchange;
impl SaslMechanism for OneRound {
    fn name(&self) -> &str {
        "PLAIN"
    }
    fn start(&self, _: &ExchangeContext) -> Box<dyn SaslExchange> {
        Box::new(OneRoundExchange)
    }
}
impl SaslExchange for OneRoundExchange {
    fn step(&mut self, token: &[u8]) -> StepOutcome {
        let user = String::from_utf8_lossy(token).into_owned();
        StepOutcome::Complete(Authenticated::new(user))
    }
}

struct Upstream;
impl ForwardingPolicy for Upstream {
    fn name(&self) -> &str {
        "upstream"
    }
    fn route(&self, _: &RequestInfo<'_>) -> Route {
        Route::Upstream {
            identity: UpstreamIdentity::Service,
        }
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn cpu_seconds() -> f64 {
    // utime + stime from /proc/self/stat, in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(api_key);
    b.put_i16(version);
    b.put_i32(correlation_id);
    b.put_i16(-1); // null client id
    b.put_slice(body);
    b.freeze()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let upstream = ApiVersionTable::from_ranges([(3, 0, 12)]);
    let sessions = ReauthScheduler::new();
    let config = Arc::new(
        ConnectionConfig::new(
            "bench",
            Arc::new(
                NodeServices::new(
                    vec![Arc::new(OneRound)],
                    Arc::new(DefaultPrincipalBuilder),
                    Arc::new(Upstream),
                    EventBus::new(),
                )
                .with_sessions(sessions.clone(), Arc::new(SecurityMetrics::default())),
            ),
            Arc::new(ArcSwap::from_pointee(ApiVersionTable::advertised(
                &upstream,
            ))),
        )
        .with_max_reauth_ms(Some(3_600_000)),
    );
    let handshake = {
        let mut body = BytesMut::new();
        body.put_i16(5);
        body.put_slice(b"PLAIN");
        frame(17, 1, 1, &body)
    };
    let before = rss_bytes();
    let started = Instant::now();
    let mut connections = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = Connection::new(Arc::clone(&config), IpAddr::from([127, 0, 0, 1]), false);
        let _ = c.handle_frame(handshake.clone(), 0);
        let user = format!("user-{i}");
        let mut body = BytesMut::new();
        body.put_i32(user.len() as i32);
        body.put_slice(user.as_bytes());
        let _ = c.handle_frame(frame(36, 1, 2, &body), 0);
        assert!(c.session().is_some(), "session {i} did not authenticate");
        connections.push(c);
    }
    let took = started.elapsed();
    let after = rss_bytes();
    println!("sessions: {n} (scheduler holds {})", sessions.len());
    println!(
        "authenticate all: {:.2} s ({:.1} µs per session)",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "RSS: {:.1} MiB before, {:.1} MiB after: {:.0} bytes per session",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after.saturating_sub(before)) as f64 / n as f64
    );
    let cpu_before = cpu_seconds();
    std::thread::sleep(Duration::from_secs(5));
    let cpu_after = cpu_seconds();
    println!("CPU while idle for 5 s: {:.2} s", cpu_after - cpu_before);
    // Expiry checks on the request path are O(1): one atomic load per request.
    let t = Instant::now();
    let expired = connections
        .iter()
        .filter(|c| c.ticket().is_some_and(|t| t.is_expired(4_000_000)))
        .count();
    println!(
        "expiry check of all {n} sessions: {:.1} ns each ({expired} expired at t+4000 s)",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    drop(connections);
    println!(
        "after dropping the connections the scheduler holds {} sessions",
        sessions.len()
    );
}
