//! The trace a client's requests leave, checked with the OpenTelemetry SDK's in-memory exporter:
//! an in-process `Server` in front of the real broker named by `PORTCULLIS_TEST_KAFKA` (like
//! `server_kafka.rs`), the same `tracing` → `tracing-opentelemetry` pipeline as `serve` with an
//! OTLP endpoint, and a raw Kafka client. Checks the span tree and attributes of a SCRAM login,
//! an authorized produce, a denied fetch, a failed login and the delegation-token operations
//! (create, renew, describe, expire, a renew of an unknown token), and that no attribute holds a
//! secret (neither a password nor a token's HMAC). `#[ignore]`d without a broker; `scripts/test.sh` runs it with `--ignored`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "an integration test reports a failure by panicking"
)]

mod telemetry_common;
mod wire_common;

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateDelegationTokenRequest, CreateDelegationTokenResponse,
    DescribeDelegationTokenRequest, DescribeDelegationTokenResponse, ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, RenewDelegationTokenRequest, RenewDelegationTokenResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use portcullis::acl::AclOperation;
use telemetry_common::{allow, scram_user, Client, Gateway, WAIT};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

const USER: &str = "carol";
const PASSWORD: &str = "carol-Secret-Value-42";
const WRONG_PASSWORD: &str = "wrong-Secret-Value-99";
const ALLOWED: &str = "telemetry-allowed";
const DENIED: &str = "telemetry-denied";
fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> String {
    attr(span, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_default()
}

fn parent<'a>(spans: &'a [SpanData], child: &SpanData) -> Option<&'a SpanData> {
    spans
        .iter()
        .find(|s| s.span_context.span_id() == child.parent_span_id)
}

fn request<'a>(spans: &'a [SpanData], api: &str, correlation_id: i32) -> &'a SpanData {
    spans
        .iter()
        .find(|s| {
            s.name == format!("kafka {api}")
                && attr(s, "kafka.correlation_id").map(|v| v.as_str().into_owned())
                    == Some(correlation_id.to_string())
        })
        .unwrap_or_else(|| panic!("no {api} request span with correlation id {correlation_id}"))
}

fn children<'a>(spans: &'a [SpanData], of: &SpanData, name: &str) -> Vec<&'a SpanData> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == of.span_context.span_id() && s.name == name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PORTCULLIS_TEST_KAFKA; run by scripts/test.sh"]
async fn spans_of_a_login_an_authorized_produce_a_denied_fetch_and_a_failed_login() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(
        // The layer `serve` installs, with its settings (telemetry::span_layer).
        portcullis_host::telemetry::span_layer(provider.tracer("test"))
            .with_filter(portcullis_host::telemetry::span_filter()),
    );
    // Global: the server's connections run on the runtime's worker threads.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let gateway = Gateway::start(
        "",
        &[
            scram_user(USER, PASSWORD),
            allow(USER, AclOperation::Write, ALLOWED),
            allow(USER, AclOperation::Create, ALLOWED),
            allow(USER, AclOperation::Describe, ALLOWED),
        ],
    )
    .await;
    let address = gateway.address;

    // 1. A SCRAM login, a produce that is allowed, a fetch that is denied.
    let mut client = Client::connect(address).await;
    assert_eq!(client.scram_login(USER, PASSWORD).await, 0);
    // Creates the topic (CREATE is granted), retrying until its leader is known.
    let metadata = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str(ALLOWED))))]))
        .with_allow_auto_topic_creation(true);
    for _ in 0..50 {
        let (_, m): (_, MetadataResponse) = client.call(ApiKey::Metadata, 9, &metadata).await;
        if m.topics
            .first()
            .is_some_and(|t| t.error_code == 0 && !t.partitions.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let produce = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(ALLOWED)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(wire_common::one_record_batch(
                    Bytes::from_static(b"traced"),
                )))])]);
    let (produce_id, produced): (_, ProduceResponse) =
        client.call(ApiKey::Produce, 9, &produce).await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    let fetch = FetchRequest::default()
        .with_max_wait_ms(10)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(DENIED)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_partition_max_bytes(1 << 20)])]);
    let (fetch_id, fetched): (_, FetchResponse) = client.call(ApiKey::Fetch, 12, &fetch).await;
    // TOPIC_AUTHORIZATION_FAILED.
    assert_eq!(fetched.responses[0].partitions[0].error_code, 29);

    // Token operations: create, renew, renew an unknown token, describe, expire.
    let (create_id, created): (_, CreateDelegationTokenResponse) = client
        .call(
            ApiKey::CreateDelegationToken,
            3,
            &CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1),
        )
        .await;
    assert_eq!(created.error_code, 0);
    let hmac = created.hmac.clone();
    let token_id = created.token_id.to_string();
    let (renew_id, renewed): (_, RenewDelegationTokenResponse) = client
        .call(
            ApiKey::RenewDelegationToken,
            2,
            &RenewDelegationTokenRequest::default()
                .with_hmac(hmac.clone())
                .with_renew_period_ms(-1),
        )
        .await;
    assert_eq!(renewed.error_code, 0);
    let (unknown_id, unknown): (_, RenewDelegationTokenResponse) = client
        .call(
            ApiKey::RenewDelegationToken,
            2,
            &RenewDelegationTokenRequest::default()
                .with_hmac(Bytes::from_static(&[7u8; 64]))
                .with_renew_period_ms(-1),
        )
        .await;
    // DELEGATION_TOKEN_NOT_FOUND.
    assert_eq!(unknown.error_code, 62);
    let (describe_id, described): (_, DescribeDelegationTokenResponse) = client
        .call(
            ApiKey::DescribeDelegationToken,
            3,
            // Null owners: every token the requester may see.
            &DescribeDelegationTokenRequest::default().with_owners(None),
        )
        .await;
    assert_eq!(described.error_code, 0);
    assert_eq!(described.tokens.len(), 1);
    let (expire_id, expired): (_, ExpireDelegationTokenResponse) = client
        .call(
            ApiKey::ExpireDelegationToken,
            2,
            &ExpireDelegationTokenRequest::default()
                .with_hmac(hmac.clone())
                .with_expiry_time_period_ms(-1),
        )
        .await;
    assert_eq!(expired.error_code, 0);
    drop(client);

    // 2. A failed login.
    let mut failing = Client::connect(address).await;
    assert_eq!(failing.scram_login(USER, WRONG_PASSWORD).await, 58);
    failing.closed().await;

    // The connection spans end when the server closes the connections; wait for both.
    let deadline = tokio::time::Instant::now() + WAIT;
    let spans = loop {
        let spans = exporter.get_finished_spans().unwrap();
        if spans
            .iter()
            .filter(|s| s.name == "kafka.connection")
            .count()
            >= 2
        {
            break spans;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "connection spans never ended: {:?}",
            spans.iter().map(|s| s.name.to_string()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // The produce: request span under the connection, with authorize and upstream children, all
    // in one trace.
    let produce = request(&spans, "Produce", produce_id);
    let connection = parent(&spans, produce).expect("the request has a parent");
    assert_eq!(connection.name, "kafka.connection");
    assert_eq!(attr_str(connection, "enduser.id"), format!("User:{USER}"));
    // Recorded once, when the connection authenticated; not again with every request.
    let principal_records = connection
        .attributes
        .iter()
        .filter(|kv| kv.key.as_str() == "enduser.id")
        .count();
    assert_eq!(principal_records, 1, "{:?}", connection.attributes);
    // telemetry::span_layer switches off the layer's per-span extras.
    for span in [connection, produce] {
        for extra in [
            "busy_ns",
            "idle_ns",
            "thread.name",
            "code.file.path",
            "target",
        ] {
            assert!(attr(span, extra).is_none(), "{extra} on {}", span.name);
        }
    }
    assert_eq!(attr_str(produce, "enduser.id"), format!("User:{USER}"));
    assert_eq!(attr_str(produce, "portcullis.route"), "upstream");
    assert_eq!(attr_str(produce, "messaging.system"), "kafka");
    assert_eq!(attr_str(produce, "kafka.api_version"), "9");
    let authorize = children(&spans, produce, "authorize");
    assert_eq!(authorize.len(), 1, "one authorize span under the produce");
    assert_eq!(attr_str(authorize[0], "authz.decision"), "allowed");
    assert!(
        attr_str(authorize[0], "authz.actions").contains(&format!("WRITE TOPIC:{ALLOWED} allowed"))
    );
    assert!(
        attr_str(authorize[0], "authz.rule").contains("acl "),
        "{:?}",
        authorize[0].attributes
    );
    let upstream = children(&spans, produce, "upstream");
    assert_eq!(upstream.len(), 1, "one upstream span under the produce");
    assert_eq!(
        upstream[0].span_kind,
        opentelemetry::trace::SpanKind::Client
    );
    assert!(!attr_str(upstream[0], "server.address").is_empty());
    // One request, one subtree: the request span ends when its response was matched, not when
    // it was forwarded (tracing-opentelemetry ends a span at its last exit).
    assert!(
        produce.end_time >= upstream[0].end_time,
        "the produce span ended before its upstream call: {:?} < {:?}",
        produce.end_time,
        upstream[0].end_time
    );
    let trace = produce.span_context.trace_id();
    assert!([connection, authorize[0], upstream[0]]
        .iter()
        .all(|s| s.span_context.trace_id() == trace));

    // The login: a sasl.authenticate span in the same trace, successful, naming the principal.
    let sasl: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "sasl.authenticate" && s.span_context.trace_id() == trace)
        .collect();
    assert_eq!(sasl.len(), 1);
    assert_eq!(attr_str(sasl[0], "sasl.mechanism"), "SCRAM-SHA-512");
    assert_eq!(attr_str(sasl[0], "sasl.outcome"), "success");
    assert_eq!(attr_str(sasl[0], "enduser.id"), format!("User:{USER}"));
    assert_eq!(parent(&spans, sasl[0]).unwrap().name, "kafka SaslHandshake");

    // The fetch: denied locally, never forwarded.
    let fetch = request(&spans, "Fetch", fetch_id);
    assert_eq!(attr_str(fetch, "portcullis.route"), "local");
    let authorize = children(&spans, fetch, "authorize");
    assert_eq!(authorize.len(), 1);
    assert_eq!(attr_str(authorize[0], "authz.decision"), "denied");
    assert!(
        attr_str(authorize[0], "authz.actions").contains(&format!("READ TOPIC:{DENIED} denied"))
    );
    assert!(attr_str(authorize[0], "authz.rule").contains("default_deny"));
    assert!(children(&spans, fetch, "upstream").is_empty());

    // The failed login: its own trace, outcome failure, no principal.
    let failed: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "sasl.authenticate" && attr_str(s, "sasl.outcome") == "failure")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_ne!(failed[0].span_context.trace_id(), trace);
    assert!(attr(failed[0], "enduser.id").is_none());
    assert!(!attr_str(failed[0], "sasl.failure").is_empty());

    // The token operations: one span each under its request, naming the requester, the token and
    // its owner, and the outcome.
    let principal = format!("User:{USER}");
    for (api, id, operation, outcome) in [
        ("CreateDelegationToken", create_id, "create", "success"),
        ("RenewDelegationToken", renew_id, "renew", "success"),
        (
            "DescribeDelegationToken",
            describe_id,
            "describe",
            "success",
        ),
        ("ExpireDelegationToken", expire_id, "expire", "success"),
        (
            "RenewDelegationToken",
            unknown_id,
            "renew",
            "DELEGATION_TOKEN_NOT_FOUND",
        ),
    ] {
        let request = request(&spans, api, id);
        assert_eq!(attr_str(request, "portcullis.route"), "local");
        let name = format!("delegation_token.{operation}");
        let token = children(&spans, request, &name);
        assert_eq!(token.len(), 1, "one {name} span under {api} {id}");
        let token = token[0];
        assert_eq!(
            token.span_context.trace_id(),
            trace,
            "{name} in the connection's trace"
        );
        assert_eq!(attr_str(token, "token.operation"), operation);
        assert_eq!(attr_str(token, "enduser.id"), principal);
        assert_eq!(attr_str(token, "token.outcome"), outcome, "{name} {id}");
        match (operation, outcome) {
            ("describe", _) => assert_eq!(attr_str(token, "token.count"), "1"),
            (_, "success") => {
                assert_eq!(attr_str(token, "token.id"), token_id);
                assert_eq!(attr_str(token, "token.owner"), principal);
            }
            _ => {
                assert!(attr(token, "token.id").is_none());
                assert!(attr(token, "token.owner").is_none());
            }
        }
    }

    // No secret anywhere: neither password, nor anything derived that a client sent, nor the
    // token's HMAC (its password: base64 on the SASL wire) in any spelling.
    use base64::Engine as _;
    let hmac_base64 = base64::engine::general_purpose::STANDARD.encode(&hmac);
    let hmac_hex: String = hmac.iter().map(|b| format!("{b:02x}")).collect();
    let hmac_debug = format!("{:?}", hmac.as_ref());
    for span in &spans {
        for kv in &span.attributes {
            let value = kv.value.as_str();
            assert!(
                !value.contains(&hmac_base64)
                    && !value.to_lowercase().contains(&hmac_hex)
                    && !value.contains(hmac_debug.trim_matches(|c| c == '[' || c == ']')),
                "{} carries the token's HMAC in {}",
                span.name,
                kv.key
            );
            assert!(
                !value.contains(PASSWORD) && !value.contains(WRONG_PASSWORD),
                "{} carries a password in {}",
                span.name,
                kv.key
            );
            assert!(!kv.key.as_str().contains("password"));
        }
    }

    gateway.stop().await;
}
