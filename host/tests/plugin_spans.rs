//! A dynamic plugin's span and log line under the host's span. In a test binary of its own:
//! `tracing` caches per process whether a callsite is enabled, and a plugin logging on another
//! test thread (without a subscriber) while this test installs its thread's subscriber can leave
//! the host's plugin-log callsite cached as disabled (tracing's callsite registration races the
//! interest rebuild), and the log line would be lost.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

mod plugin_common;
use plugin_common::*;

/// Plugins trace through the host's services: the topic guard, loaded through the C ABI, opens a
/// span when it refuses and logs on it. With the host's `tracing` → OpenTelemetry pipeline (the
/// SDK's in-memory exporter, this thread only), that span is a child of the host's span current
/// at the call, in the same trace, and the log line is an event on it.
#[test]
fn a_dynamic_plugin_s_span_and_log_line_appear_under_the_host_s_span() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::Layer as _;

    let (report, _, _) = load_with("");
    let PluginInstance::ForwardingPolicy(policy) = instance(&report, "topic-guard") else {
        panic!("not a policy")
    };
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("test"))
            .with_filter(portcullis_host::telemetry::span_filter()),
    );
    let alice = Principal::user("alice");
    let write = |name| Action::new(AclOperation::Write, ResourceType::Topic, name);
    tracing::subscriber::with_default(subscriber, || {
        let host = tracing::info_span!(target: portcullis::telemetry::SPAN_TARGET, "authorize");
        let _current = host.enter();
        assert!(!policy.admits(&request(&alice, 0), &write("audit.events")));
        // Admitted: the plugin opens no span.
        assert!(policy.admits(&request(&alice, 0), &write("orders")));
    });
    let spans = exporter.get_finished_spans().unwrap();
    let host = spans
        .iter()
        .find(|s| s.name == "authorize")
        .expect("the host's span");
    let plugin: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "topic-guard.refuse")
        .collect();
    assert_eq!(
        plugin.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let plugin = plugin[0];
    assert_eq!(plugin.parent_span_id, host.span_context.span_id());
    assert_eq!(plugin.span_context.trace_id(), host.span_context.trace_id());
    assert!(plugin
        .attributes
        .iter()
        .any(|kv| kv.key.as_str() == "portcullis.plugin" && kv.value.as_str() == "topic-guard"));
    assert!(
        plugin
            .events
            .events
            .iter()
            .any(|e| e.name.contains("produce to audit.events refused")),
        "the plugin's log line is an event of its span: {:?}",
        plugin.events.events
    );
    // The host's span got no copy of the line: it went to the innermost span.
    assert!(host.events.events.is_empty(), "{:?}", host.events.events);
}
