//! No log line may be lost to the subscriber's filtering (`telemetry::subscriber`, what `serve`
//! installs). `tracing-subscriber`'s per-layer filters carry each decision from `enabled` to the
//! next span or event in a thread-local; a decision that nobody consumes (an `enabled` call that
//! ends in "this layer does not want it") then silently drops the next event on that thread whose
//! callsite skips `enabled`. A clean-clone CI run lost the "upstream delegation token created"
//! line that way. Both tests lose every line with the earlier subscribers (a per-layer filter on
//! the log layer; no re-check in front of the exporting layers); `telemetry_filtering_race.rs`
//! has the race that triggered it.
//!
//! Each test installs its subscriber as the default of its own thread, one test at a time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "an integration test reports a failure by panicking"
)]

mod capture_common;
use capture_common::Captured;

use std::sync::Mutex;

use opentelemetry::trace::TracerProvider as _;
use portcullis_host::telemetry::{self, LogFormat, PLUGIN_LOG_TARGET, SPAN_TARGET};
use tracing::callsite::{Callsite, Identifier};
use tracing::field::FieldSet;
use tracing::metadata::Kind;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};

/// One test at a time: the callsites below are shared by the modes.
static SERIAL: Mutex<()> = Mutex::new(());

/// The metadata of an event of the exported-span target, which the log layer switches off (and
/// only the span exporter wants): what a thread asks the subscriber when it finds the callsite
/// being registered by another thread, or what a `log` record of a switched-off target looks
/// like through `tracing-log`.
struct SwitchedOff;
static SWITCHED_OFF: SwitchedOff = SwitchedOff;
static SWITCHED_OFF_META: Metadata<'static> = Metadata::new(
    "switched off",
    SPAN_TARGET,
    Level::INFO,
    None,
    None,
    None,
    FieldSet::new(&[], Identifier(&SWITCHED_OFF)),
    Kind::EVENT,
);
impl Callsite for SwitchedOff {
    fn set_interest(&self, _: Interest) {}
    fn metadata(&self) -> &Metadata<'_> {
        &SWITCHED_OFF_META
    }
}

/// The subscriber `serve` installs, without and with span export, writing logs to `captured`.
fn subscriber(exporting: bool, captured: &Captured) -> tracing::Dispatch {
    let writer = captured.clone();
    let tracer = exporting.then(|| {
        opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .build()
            .tracer("test")
    });
    telemetry::subscriber(LogFormat::Text, false, move || writer.clone(), tracer)
}

/// Asked directly whether anyone wants a switched-off event (the log layer says no), then a line
/// at info and a plugin's line (the one target both layers want when exporting): both are
/// written, every time.
fn a_refused_enabled_check_does_not_swallow_the_next_line(exporting: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let captured = Captured::default();
    let dispatch = subscriber(exporting, &captured);
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..10 {
            let _ = tracing::dispatcher::get_default(|d| d.enabled(&SWITCHED_OFF_META));
            tracing::info!(target: PLUGIN_LOG_TARGET, "plugin line after a refused check");
            tracing::info!("log line after a refused check");
        }
    });
    assert_eq!(captured.count("log line after a refused check"), 10);
    assert_eq!(captured.count("plugin line after a refused check"), 10);
}

#[test]
fn logs_only_a_refused_enabled_check_does_not_swallow_the_next_line() {
    a_refused_enabled_check_does_not_swallow_the_next_line(false);
}

#[test]
fn exporting_a_refused_enabled_check_does_not_swallow_the_next_line() {
    a_refused_enabled_check_does_not_swallow_the_next_line(true);
}
