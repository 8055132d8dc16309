//! Telemetry off (no `otlp_endpoint`, how `serve` runs by default): the subscriber that
//! `telemetry::init` installs must not want the per-request spans, so that a request costs no
//! span in the `tracing` registry. Its own test binary: `init` installs the process's global
//! subscriber once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an integration test reports a failure by panicking"
)]

use portcullis_host::telemetry::{self, config::TelemetryConfig, traces};

/// A Produce v9 request header: api key, version, correlation id, client id "c".
const PRODUCE_HEADER: [u8; 11] = [0, 0, 0, 9, 0, 0, 0, 7, 0, 1, b'c'];

#[test]
fn without_an_exporter_requests_create_no_spans() {
    let _telemetry = telemetry::init(&TelemetryConfig::default()).expect("telemetry init");
    assert!(
        traces::request_span(&PRODUCE_HEADER).is_none(),
        "a request span was created although no layer exports spans"
    );
    // Every exported span (request, authorize, upstream call, plugin call) has this target.
    assert!(!tracing::enabled!(
        target: telemetry::SPAN_TARGET,
        tracing::Level::INFO
    ));
    // Log lines still pass at the default level.
    assert!(tracing::enabled!(tracing::Level::INFO));
}
