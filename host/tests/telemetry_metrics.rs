//! The counters a client's actions leave, read through the OpenTelemetry SDK's in-memory metric
//! exporter: an in-process gateway in front of the real broker named by `PORTCULLIS_TEST_KAFKA`,
//! the instruments bound to a meter provider installed as the global one (as `serve` does), and
//! raw Kafka clients that log in (n successes, one failure), re-authenticate once (KIP-368), are
//! denied m fetches and call the token APIs. Every count is checked exactly. `#[ignore]`d without a
//! broker; `scripts/test.sh` runs it with `--ignored`.
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
use kafka_protocol::messages::{
    ApiKey, CreateDelegationTokenRequest, CreateDelegationTokenResponse,
    DescribeDelegationTokenRequest, DescribeDelegationTokenResponse, FetchRequest, FetchResponse,
    RenewDelegationTokenRequest, RenewDelegationTokenResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use telemetry_common::{scram_user, Client, Gateway};

const USER: &str = "dave";
const PASSWORD: &str = "dave-Secret-Value-17";
const WRONG_PASSWORD: &str = "wrong-Secret-Value-71";
const DENIED: &str = "metrics-denied";
/// Successful logins (n) and denied fetches (m).
const LOGINS: usize = 3;
const DENIALS: usize = 4;

/// The value of the `u64` sum `name` whose attributes include every pair of `with`; 0 when there
/// is no such point. Panics when several points match (the test would be ambiguous).
fn sum(metrics: &ResourceMetrics, name: &str, with: &[(&str, &str)]) -> u64 {
    let mut found = Vec::new();
    for scope in metrics.scope_metrics() {
        for metric in scope.metrics().filter(|m| m.name() == name) {
            let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() else {
                panic!("{name} is not a u64 sum");
            };
            for point in sum.data_points() {
                let attributes: Vec<&KeyValue> = point.attributes().collect();
                if with.iter().all(|(k, v)| {
                    attributes
                        .iter()
                        .any(|kv| kv.key.as_str() == *k && kv.value.as_str() == *v)
                }) {
                    found.push(point.value());
                }
            }
        }
    }
    assert!(
        found.len() <= 1,
        "{name} {with:?}: several points {found:?}"
    );
    found.first().copied().unwrap_or(0)
}

fn gauge(metrics: &ResourceMetrics, name: &str) -> Option<i64> {
    metrics
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)
        .and_then(|m| match m.data() {
            AggregatedMetrics::I64(MetricData::Gauge(g)) => {
                g.data_points().next().map(|p| p.value())
            }
            _ => None,
        })
}

/// Everything recorded so far (cumulative), exported now.
fn collect(provider: &SdkMeterProvider, exporter: &InMemoryMetricExporter) -> ResourceMetrics {
    exporter.reset();
    provider.force_flush().unwrap();
    exporter
        .get_finished_metrics()
        .unwrap()
        .pop()
        .expect("the flush exported nothing")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PORTCULLIS_TEST_KAFKA; run by scripts/test.sh"]
async fn counters_match_logins_a_reauthentication_denials_and_token_operations() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    // Before the node is built: the host's instruments bind to the global provider once.
    opentelemetry::global::set_meter_provider(provider.clone());
    // What `serve` does when it installs a reader: authorizations are then counted and timed.
    portcullis_host::telemetry::set_metrics_enabled(true);

    let gateway = Gateway::start(
        "connections_max_reauth_ms = 600000",
        &[scram_user(USER, PASSWORD)],
    )
    .await;

    // n logins, each on its own connection, kept open (active sessions).
    let mut clients = Vec::new();
    for _ in 0..LOGINS {
        let mut client = Client::connect(gateway.address).await;
        assert_eq!(client.scram_login(USER, PASSWORD).await, 0);
        clients.push(client);
    }
    // One failed login.
    let mut failing = Client::connect(gateway.address).await;
    assert_eq!(failing.scram_login(USER, WRONG_PASSWORD).await, 58);
    failing.closed().await;

    // m denied fetches.
    let fetch = FetchRequest::default()
        .with_max_wait_ms(10)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(DENIED)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_partition_max_bytes(1 << 20)])]);
    for _ in 0..DENIALS {
        let (_, fetched): (_, FetchResponse) = clients[0].call(ApiKey::Fetch, 12, &fetch).await;
        // TOPIC_AUTHORIZATION_FAILED.
        assert_eq!(fetched.responses[0].partitions[0].error_code, 29);
    }

    // Token operations: a create, a renew of an unknown token, a describe.
    let (_, created): (_, CreateDelegationTokenResponse) = clients[1]
        .call(
            ApiKey::CreateDelegationToken,
            3,
            &CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1),
        )
        .await;
    assert_eq!(created.error_code, 0);
    let (_, unknown): (_, RenewDelegationTokenResponse) = clients[1]
        .call(
            ApiKey::RenewDelegationToken,
            2,
            &RenewDelegationTokenRequest::default()
                .with_hmac(Bytes::from_static(&[9u8; 64]))
                .with_renew_period_ms(-1),
        )
        .await;
    assert_eq!(unknown.error_code, 62);
    let (_, described): (_, DescribeDelegationTokenResponse) = clients[1]
        .call(
            ApiKey::DescribeDelegationToken,
            3,
            &DescribeDelegationTokenRequest::default().with_owners(None),
        )
        .await;
    assert_eq!(described.tokens.len(), 1);

    // One re-authentication: KIP-368 refuses a handshake within a second of the last login.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(clients[2].scram_exchange(USER, PASSWORD).await, 0);

    let metrics = collect(&provider, &exporter);
    let auth = "portcullis.authentications";
    let scram = ("sasl.mechanism", "SCRAM-SHA-512");
    let first = ("reauthentication", "false");
    let again = ("reauthentication", "true");
    assert_eq!(
        sum(&metrics, auth, &[scram, ("outcome", "success"), first]),
        LOGINS as u64
    );
    assert_eq!(
        sum(&metrics, auth, &[scram, ("outcome", "failure"), first]),
        1
    );
    assert_eq!(
        sum(&metrics, auth, &[scram, ("outcome", "success"), again]),
        1
    );
    assert_eq!(sum(&metrics, auth, &[("outcome", "failure"), again]), 0);

    let decisions = "portcullis.authorization.decisions";
    let read_topic = [("resource.type", "TOPIC"), ("operation", "READ")];
    assert_eq!(
        sum(
            &metrics,
            decisions,
            &[read_topic[0], read_topic[1], ("outcome", "denied")]
        ),
        DENIALS as u64
    );
    assert_eq!(
        sum(
            &metrics,
            decisions,
            &[read_topic[0], read_topic[1], ("outcome", "allowed")]
        ),
        0
    );

    let tokens = "portcullis.delegation_token.operations";
    for (operation, outcome) in [
        ("create", "success"),
        ("renew", "DELEGATION_TOKEN_NOT_FOUND"),
        ("describe", "success"),
    ] {
        assert_eq!(
            sum(
                &metrics,
                tokens,
                &[("operation", operation), ("outcome", outcome)]
            ),
            1,
            "{operation} {outcome}"
        );
    }
    assert_eq!(sum(&metrics, tokens, &[("operation", "expire")]), 0);

    assert_eq!(
        gauge(&metrics, "portcullis.sessions.active"),
        Some(LOGINS as i64),
        "the n logged-in connections are the active sessions"
    );

    drop(clients);
    gateway.stop().await;
    provider.shutdown().unwrap();
}
