//! OpenTelemetry traces and metrics, the log format, and the admin endpoint
//! (docs/observability.md).
//!
//! - [`init`] installs the process's `tracing` subscriber: a log layer (text or JSON, `RUST_LOG`)
//!   and, only when `otlp_endpoint` is set, a `tracing-opentelemetry` layer that turns the spans
//!   of target [`SPAN_TARGET`] into OTLP spans. Without an endpoint that target is switched off in
//!   every layer, so each span macro on the request path is one cached callsite check.
//! - Metrics are OpenTelemetry instruments ([`metrics::Instruments`]) on the global meter
//!   provider, read by the Prometheus registry behind the admin endpoint and/or pushed over OTLP.
//! - [`traces`] builds the spans the host owns (connection, request, upstream call), and
//!   [`authorizer::Instrumented`] the authorization span and metrics.

pub mod admin;
pub mod authorizer;
pub mod config;
pub mod metrics;
pub mod traces;

use std::io;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

pub use config::{LogFormat, TelemetryConfig};
pub use portcullis::telemetry::SPAN_TARGET;

/// The instrumentation scope of every span and instrument.
pub const SCOPE: &str = "portcullis";

/// What [`init`] set up; [`Telemetry::shutdown`] flushes the exporters.
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    /// The registry the admin endpoint's `/metrics` reads (present with `prometheus_address`).
    pub prometheus: Option<prometheus::Registry>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("traces", &self.tracer_provider.is_some())
            .field("metrics", &self.meter_provider.is_some())
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Exports what is buffered and stops the exporters (at process exit).
    pub fn shutdown(&self) {
        if let Some(provider) = &self.tracer_provider {
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "flushing the last spans failed");
            }
        }
        if let Some(provider) = &self.meter_provider {
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "flushing the last metrics failed");
            }
        }
    }
}

fn resource(config: &TelemetryConfig) -> Resource {
    Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attributes([opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        )])
        .build()
}

/// The OTLP/HTTP URL of one signal under the configured base URL.
fn signal_url(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

/// Builds the trace pipeline: OTLP/HTTP with a batch processor (its own thread), sampled by
/// `trace_sample_ratio` at the root (the connection span) and following the parent below it.
fn tracer_provider(config: &TelemetryConfig, endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(signal_url(endpoint, "/v1/traces"))
        .build()
        .context("cannot build the OTLP span exporter")?;
    Ok(SdkTracerProvider::builder()
        .with_resource(resource(config))
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.trace_sample_ratio,
        ))))
        .with_batch_exporter(exporter)
        .build())
}

/// Builds the meter provider: a Prometheus reader and/or an OTLP push reader; `None` when
/// neither is configured (the instruments are then no-ops).
fn meter_provider(
    config: &TelemetryConfig,
) -> anyhow::Result<(Option<SdkMeterProvider>, Option<prometheus::Registry>)> {
    let mut builder = SdkMeterProvider::builder().with_resource(resource(config));
    let mut registry = None;
    if config.prometheus_address.is_some() {
        let r = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(r.clone())
            .build()
            .context("cannot build the Prometheus exporter")?;
        builder = builder.with_reader(exporter);
        registry = Some(r);
    }
    if let Some(endpoint) = &config.otlp_endpoint {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(signal_url(endpoint, "/v1/metrics"))
            .build()
            .context("cannot build the OTLP metric exporter")?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(Duration::from_millis(config.metrics_export_interval_ms))
            .build();
        builder = builder.with_reader(reader);
    }
    if registry.is_none() && config.otlp_endpoint.is_none() {
        return Ok((None, None));
    }
    Ok((Some(builder.build()), registry))
}

/// The log layer's filter: `RUST_LOG` (default `info`), with the exported spans switched off —
/// log lines do not need them, and a span no layer wants costs nothing.
fn log_filter() -> EnvFilter {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    match format!("{SPAN_TARGET}=off").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// What the OpenTelemetry layer exports: the [`SPAN_TARGET`] spans, at info and above, and the
/// log lines plugins write through the host services (target `portcullis::plugin`), which become
/// events of the span current when the plugin was called (a dynamic authorizer's lines land on
/// its `authorize` span).
pub fn span_filter() -> Targets {
    Targets::new()
        .with_target(SPAN_TARGET, LevelFilter::INFO)
        .with_target(PLUGIN_LOG_TARGET, LevelFilter::INFO)
}

/// The target of plugin log lines (`HostServices::log`).
pub const PLUGIN_LOG_TARGET: &str = "portcullis::plugin";

/// Sets up logs, traces and metrics for `serve`, before the async runtime starts (the blocking
/// OTLP client must not be created on a runtime thread). Must be called once per process.
pub fn init(config: &TelemetryConfig) -> anyhow::Result<Telemetry> {
    let tracer_provider = match &config.otlp_endpoint {
        Some(endpoint) => Some(tracer_provider(config, endpoint)?),
        None => None,
    };
    let otel_layer = tracer_provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(SCOPE))
            .with_filter(span_filter())
    });
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let (text, json) = match config.log_format {
        LogFormat::Text => (
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(io::stderr)
                    .with_ansi(ansi)
                    .with_filter(log_filter()),
            ),
            None,
        ),
        LogFormat::Json => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(io::stderr)
                    .with_filter(log_filter()),
            ),
        ),
    };
    // Fails only if a subscriber is already installed, which then keeps logging.
    let _ = tracing_subscriber::registry()
        .with(text)
        .with(json)
        .with(otel_layer)
        .try_init();
    if let Some(provider) = &tracer_provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
    }
    let (meter_provider, prometheus) = meter_provider(config)?;
    if let Some(provider) = &meter_provider {
        opentelemetry::global::set_meter_provider(provider.clone());
        set_metrics_enabled(true);
    }
    Ok(Telemetry {
        tracer_provider,
        meter_provider,
        prometheus,
    })
}

/// Whether a meter provider was installed: timing (a clock read per authorization) is only done
/// when someone reads the histograms.
pub fn metrics_enabled() -> bool {
    METRICS_ON.load(std::sync::atomic::Ordering::Relaxed)
}

static METRICS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks metrics as read (set by [`init`] when a reader exists; tests set it themselves).
pub fn set_metrics_enabled(on: bool) {
    METRICS_ON.store(on, std::sync::atomic::Ordering::Relaxed);
}
