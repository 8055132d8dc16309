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
pub mod sampling;
pub mod traces;

use std::io;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

pub use config::{LogFormat, OtlpProtocol, TelemetryConfig};
pub use portcullis::telemetry::SPAN_TARGET;
pub use sampling::set_ratio as set_trace_sample_ratio;

/// The instrumentation scope of every span and instrument.
pub const SCOPE: &str = "portcullis";

/// What [`init`] set up; [`Telemetry::shutdown`] flushes the exporters.
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    /// With OTLP/gRPC: the runtime that drives the gRPC channel (see [`ExportRuntime`]).
    /// Declared after the providers so that it outlives their last export.
    _export_runtime: Option<ExportRuntime>,
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

/// A one-thread tokio runtime of its own for the OTLP/gRPC exporters. The gRPC channel (tonic)
/// spawns its connection task on the runtime current when it is built, and the SDK's batch
/// processor and periodic reader call the exporter from their own threads; a separate runtime
/// keeps export I/O off the data path's runtime and lets [`init`] run before that one exists
/// (and flush after it stopped).
struct ExportRuntime(tokio::runtime::Runtime);

impl ExportRuntime {
    fn start() -> anyhow::Result<Self> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-grpc")
            .enable_all()
            .build()
            .map(Self)
            .context("cannot start the OTLP/gRPC export runtime")
    }
}

/// Makes ring the process-wide rustls provider unless one is set. The OTLP/HTTP exporters build
/// their own blocking reqwest client, and reqwest (compiled with rustls and no provider of its own,
/// for the OAuth client that hands it a preconfigured TLS setup) takes the process default: without
/// one its client thread panics and the exporter cannot be built, even for a plain `http://`
/// collector. Installing twice, or after someone else, is harmless.
fn ensure_default_crypto_provider() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}

/// The OTLP span exporter for `endpoint` over the configured protocol; a gRPC channel is built
/// inside `runtime` (present exactly when the protocol is gRPC).
fn span_exporter(
    protocol: OtlpProtocol,
    endpoint: &str,
    runtime: Option<&ExportRuntime>,
) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    let built = match (protocol, runtime) {
        (OtlpProtocol::Grpc, Some(runtime)) => {
            let _entered = runtime.0.enter();
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .build()
        }
        (OtlpProtocol::HttpProtobuf, _) => {
            ensure_default_crypto_provider();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(signal_url(endpoint, "/v1/traces"))
                .build()
        }
        (OtlpProtocol::Grpc, None) => anyhow::bail!("OTLP/gRPC needs its export runtime"),
    };
    built.with_context(|| {
        format!(
            "cannot build the OTLP span exporter ({}, {endpoint})",
            protocol.as_str()
        )
    })
}

/// The OTLP metric exporter, as [`span_exporter`].
fn metric_exporter(
    protocol: OtlpProtocol,
    endpoint: &str,
    runtime: Option<&ExportRuntime>,
) -> anyhow::Result<opentelemetry_otlp::MetricExporter> {
    let built = match (protocol, runtime) {
        (OtlpProtocol::Grpc, Some(runtime)) => {
            let _entered = runtime.0.enter();
            opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .build()
        }
        (OtlpProtocol::HttpProtobuf, _) => {
            ensure_default_crypto_provider();
            opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_endpoint(signal_url(endpoint, "/v1/metrics"))
                .build()
        }
        (OtlpProtocol::Grpc, None) => anyhow::bail!("OTLP/gRPC needs its export runtime"),
    };
    built.with_context(|| {
        format!(
            "cannot build the OTLP metric exporter ({}, {endpoint})",
            protocol.as_str()
        )
    })
}

/// Builds the trace pipeline: OTLP with a batch processor (its own thread), sampled by
/// `trace_sample_ratio` at the root (the connection span; a reload may change it, see
/// [`sampling`]) and following the parent below it.
fn tracer_provider(
    config: &TelemetryConfig,
    endpoint: &str,
    runtime: Option<&ExportRuntime>,
) -> anyhow::Result<SdkTracerProvider> {
    let exporter = span_exporter(config.otlp_protocol, endpoint, runtime)?;
    sampling::set_ratio(config.trace_sample_ratio);
    Ok(SdkTracerProvider::builder()
        .with_resource(resource(config))
        .with_sampler(sampling::sampler())
        .with_batch_exporter(exporter)
        .build())
}

/// Builds the meter provider: a Prometheus reader and/or an OTLP push reader; `None` when
/// neither is configured (the instruments are then no-ops).
fn meter_provider(
    config: &TelemetryConfig,
    runtime: Option<&ExportRuntime>,
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
        let exporter = metric_exporter(config.otlp_protocol, endpoint, runtime)?;
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

/// The `tracing-opentelemetry` layer that turns spans into OpenTelemetry spans of `tracer`,
/// with the layer's per-span extras switched off: they cost on every span or on every poll of
/// the connection's task, and carry nothing an operator reads (docs/observability.md, "Cost").
/// - no busy/idle time (`busy_ns`, `idle_ns`): two clock reads on every enter and exit, and
///   the connection span is entered on every poll of its task;
/// - no OpenTelemetry context activation on enter: nothing here reads
///   `opentelemetry::Context::current()` (parents are `tracing` parents);
/// - no `thread.id`/`thread.name` (a `String` per span), no `code.*` location and no `target`
///   attribute (always `portcullis::span`): three to five attributes per span less to build,
///   queue, encode and send.
pub fn span_layer<S, T>(tracer: T) -> tracing_opentelemetry::OpenTelemetryLayer<S, T>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    T: opentelemetry::trace::Tracer + 'static,
    T::Span: Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_threads(false)
        .with_location(false)
        .with_target(false)
}

/// The target of plugin log lines (`HostServices::log`).
pub const PLUGIN_LOG_TARGET: &str = "portcullis::plugin";

/// The process's subscriber: the log layer writing to `writer` and, with a `tracer`, the layer
/// that exports the [`SPAN_TARGET`] spans.
///
/// Without a tracer there is one global filter and no per-layer filter. `tracing-subscriber`'s
/// per-layer filters pass each decision from `enabled` to the following `on_event` in a
/// thread-local, and a decision no event consumes stays behind: an `enabled` call that ends in
/// "nobody wants this" (a `tracing::enabled!` check, a `log` record, or a callsite another thread
/// is registering at that moment, which is then `Interest::sometimes`) makes the next event on
/// that thread whose callsite skips `enabled` (cached `Interest::always`) vanish
/// (tokio-rs/tracing#2519). Log lines went missing that way (`tests/telemetry_filtering.rs`).
///
/// With a tracer the two layers want different things, so each keeps its own filter; in front
/// of them `RecheckEveryCallsite` makes every callsite `Interest::sometimes`, so `enabled`
/// runs (and overwrites each filter's decision) before every span and event.
///
/// Only configured layers are stacked, never an `Option` layer: a `None` layer tells the registry
/// it wants every callsite, and each request would then make spans nobody records
/// (`tests/telemetry_disabled.rs`).
pub fn subscriber<W>(
    log_format: LogFormat,
    ansi: bool,
    writer: W,
    tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
) -> tracing::Dispatch
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::Layered;
    use tracing_subscriber::Registry;
    match tracer {
        None => tracing_subscriber::registry()
            .with(log_filter())
            .with(log_layer::<Layered<EnvFilter, Registry>, W>(
                log_format, ansi, writer,
            ))
            .into(),
        Some(tracer) => {
            let filter = log_filter();
            let hint = tracing_subscriber::Layer::<Registry>::max_level_hint(&filter)
                .map(|level| level.max(LevelFilter::INFO));
            let layers: Vec<BoxedLayer<Registry>> = vec![
                log_layer(log_format, ansi, writer)
                    .with_filter(filter)
                    .boxed(),
                span_layer(tracer).with_filter(span_filter()).boxed(),
            ];
            tracing_subscriber::registry()
                .with(layers)
                .with(RecheckEveryCallsite { hint })
                .into()
        }
    }
}

type BoxedLayer<S> = Box<dyn tracing_subscriber::Layer<S> + Send + Sync>;

/// The log layer in the configured format.
fn log_layer<S, W>(log_format: LogFormat, ansi: bool, writer: W) -> BoxedLayer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    match log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(writer)
            .boxed(),
    }
}

/// A layer that filters nothing and caches nothing: every callsite is `Interest::sometimes`, so
/// the per-layer filters behind it are asked before each span and event (see [`subscriber`]).
/// `hint` keeps the level check of the macros (below it nothing reaches `enabled`).
struct RecheckEveryCallsite {
    hint: Option<LevelFilter>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RecheckEveryCallsite {
    fn register_callsite(
        &self,
        _metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.hint
    }
}

/// Sets up logs, traces and metrics for `serve`, before the async runtime starts (the blocking
/// OTLP/HTTP client must not be created on a runtime thread; OTLP/gRPC gets a runtime of its
/// own). Must be called once per process.
pub fn init(config: &TelemetryConfig) -> anyhow::Result<Telemetry> {
    let export_runtime = match (&config.otlp_endpoint, config.otlp_protocol) {
        (Some(_), OtlpProtocol::Grpc) => Some(ExportRuntime::start()?),
        _ => None,
    };
    let tracer_provider = match &config.otlp_endpoint {
        Some(endpoint) => Some(tracer_provider(config, endpoint, export_runtime.as_ref())?),
        None => None,
    };
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let tracer = tracer_provider
        .as_ref()
        .map(|provider| provider.tracer(SCOPE));
    // Fails only if a subscriber is already installed, which then keeps logging.
    let _ = subscriber(config.log_format, ansi, io::stderr, tracer).try_init();
    if let Some(provider) = &tracer_provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
    }
    if let Some(warning) = config
        .otlp_endpoint
        .as_deref()
        .and_then(|endpoint| config.otlp_protocol.mismatch(endpoint))
    {
        tracing::warn!("{warning}");
    }
    let (meter_provider, prometheus) = meter_provider(config, export_runtime.as_ref())?;
    if let Some(provider) = &meter_provider {
        opentelemetry::global::set_meter_provider(provider.clone());
        set_metrics_enabled(true);
    }
    Ok(Telemetry {
        tracer_provider,
        meter_provider,
        _export_runtime: export_runtime,
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
