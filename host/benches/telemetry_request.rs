//! What telemetry costs on the request path, per Produce request: the spans and metrics one
//! forwarded Produce makes (`kafka Produce` under the connection's span, its `authorize` and
//! `upstream` children, the authorization count and histograms), with export off and on.
//!
//! - `disabled`: no layer wants the span target (as `serve` without `otlp_endpoint`);
//! - `exporting/default-layer`: `tracing_opentelemetry::layer()` with its defaults (busy/idle
//!   timing, context activation, thread and location attributes), what `serve` installed before
//!   `telemetry::span_layer`;
//! - `exporting/span-layer`: `telemetry::span_layer`, what `serve` installs.
//!
//! Exporting means the SDK's batch span processor (its own thread) in front of an exporter that
//! drops the batches, and a meter provider with a manual reader: the request thread's work is
//! measured, not the encoding and sending on the exporter's thread (that CPU shows in
//! `scripts/bench-datapath.sh --telemetry`). Each variant installs its subscriber as the thread's
//! default (`with_default`), so callsite interest is re-checked per call in every variant; the
//! absolute `disabled` figure is therefore an upper bound of `serve`'s, where the global
//! subscriber lets `tracing` cache it.
//!
//! `cargo bench -p portcullis-host --bench telemetry_request` (figures: docs/benchmarks.md).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::{ManualReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use portcullis::acl::{AclOperation, ResourceType};
use portcullis::authorizer::{
    Action, Authorization, Authorizer, DecidingRule, Decision, RequestContext,
};
use portcullis::principal::Principal;
use portcullis_host::telemetry::{self, authorizer::Instrumented, traces};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

/// Drops what it is given: the cost measured is the request thread's.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// Allows everything as a super user: the authorizer's own cost is another benchmark's.
struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(
        &self,
        _context: &RequestContext<'_>,
        actions: &[Action<'_>],
    ) -> Vec<Authorization> {
        actions
            .iter()
            .map(|_| Authorization::allowed(DecidingRule::SuperUser))
            .collect()
    }

    fn authorize_by_resource_type(
        &self,
        _context: &RequestContext<'_>,
        _operation: AclOperation,
        _resource_type: ResourceType,
    ) -> Decision {
        Decision::Allowed
    }
}

/// The header of a Produce v9 request (what `request_span` reads).
fn produce_frame() -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&0i16.to_be_bytes());
    frame.extend_from_slice(&9i16.to_be_bytes());
    frame.extend_from_slice(&42i32.to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame
}

/// One Produce, as `server/client.rs` traces it: the connection's span entered for the poll
/// that reads the frame, the request span, the authorization (through the instrumented
/// authorizer), the request's decision, the upstream call started, the poll that reads the
/// response (the connection span entered again) finishing it.
fn one_produce(
    connection: &tracing::Span,
    authorizer: &dyn Authorizer,
    principal: &Principal,
    frame: &[u8],
) {
    let call = {
        let _poll = connection.enter();
        let request = traces::request_span(frame);
        let context = RequestContext::new(
            principal,
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            "client",
            0,
            9,
            42,
        );
        let actions = [Action::new(
            AclOperation::Write,
            ResourceType::Topic,
            "orders",
        )];
        request.in_scope(|| {
            authorizer.authorize_each(&context, &actions, &mut |_, answer| {
                std::hint::black_box(answer);
            })
        });
        // What `traces::record_decision` records for a forwarded request.
        if !request.is_disabled() {
            request.record("enduser.id", tracing::field::display(principal));
            request.record("portcullis.route", "upstream");
        }
        traces::UpstreamCall::start(&request, 0, Some("127.0.0.1:9092"))
    };
    let _poll = connection.enter();
    call.finish();
    drop(call);
}

fn bench(c: &mut Criterion) {
    let authorizer = Instrumented::wrap(Arc::new(AllowAll));
    let principal = Principal::user("alice");
    let frame = produce_frame();
    let mut group = c.benchmark_group("telemetry_per_produce");

    // Export off: only a log layer, which switches the span target off (as `serve` does).
    let off = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_default(tracing::level_filters::LevelFilter::WARN),
            ),
    );
    tracing::subscriber::with_default(off, || {
        telemetry::set_metrics_enabled(false);
        let connection = traces::connection_span(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 50_000)),
            "client",
            "bootstrap",
            false,
        );
        group.bench_function("disabled", |b| {
            b.iter(|| one_produce(&connection, authorizer.as_ref(), &principal, &frame))
        });
    });

    // Metrics read (a manual reader: recording cost only), for both exporting variants. The
    // instruments are made from the global provider on first use, so it is installed first.
    let meters = SdkMeterProvider::builder()
        .with_reader(ManualReader::builder().build())
        .build();
    opentelemetry::global::set_meter_provider(meters.clone());
    telemetry::set_metrics_enabled(true);

    for (name, tuned) in [
        ("exporting/default-layer", false),
        ("exporting/span-layer", true),
    ] {
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Discard)
            .build();
        let tracer = provider.tracer(telemetry::SCOPE);
        let run = |group: &mut criterion::BenchmarkGroup<'_, _>| {
            let connection = traces::connection_span(
                SocketAddr::from((Ipv4Addr::LOCALHOST, 50_000)),
                "client",
                "bootstrap",
                false,
            );
            group.bench_function(name, |b| {
                b.iter(|| one_produce(&connection, authorizer.as_ref(), &principal, &frame))
            });
        };
        if tuned {
            let subscriber = tracing_subscriber::registry()
                .with(telemetry::span_layer(tracer).with_filter(telemetry::span_filter()));
            tracing::subscriber::with_default(subscriber, || run(&mut group));
        } else {
            let subscriber = tracing_subscriber::registry().with(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(telemetry::span_filter()),
            );
            tracing::subscriber::with_default(subscriber, || run(&mut group));
        }
        let _ = provider.shutdown();
    }
    group.finish();
    let _ = meters.shutdown();
}

criterion_group!(benches, bench);
criterion_main!(benches);
