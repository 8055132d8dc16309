//! The spans the host owns: one per client connection (the trace's root), one per request (its
//! child), one per upstream call (the request's child, ended when the upstream's response is
//! matched). The framework adds `sasl.authenticate` and the authorizer wrapper `authorize` under
//! the request span. With no OTLP endpoint every one of them is disabled (`Span::none()`).

use std::net::SocketAddr;
use std::time::Instant;

use kafka_protocol::messages::ApiKey;
use opentelemetry::KeyValue;
use portcullis::connection::{Action, Connection};
use tracing::field::Empty;

use super::metrics::instruments;
use super::SPAN_TARGET;

/// The span of one client connection.
pub fn connection_span(peer: SocketAddr, listener: &str, target: &str, tls: bool) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "kafka.connection",
        otel.kind = "server",
        client.address = %peer.ip(),
        client.port = peer.port(),
        network.transport = "tcp",
        portcullis.listener = listener,
        portcullis.target = target,
        tls = tls,
        enduser.id = Empty,
    )
}

/// The name of a Kafka API (`Produce`), or `Unknown`.
pub fn api_name(api_key: i16) -> &'static str {
    match ApiKey::try_from(api_key) {
        Ok(key) => api_key_name(key),
        Err(()) => "Unknown",
    }
}

fn api_key_name(key: ApiKey) -> &'static str {
    // kafka-protocol names its keys after the messages; the Debug name is that name.
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        ApiKey::CreateDelegationToken => "CreateDelegationToken",
        ApiKey::RenewDelegationToken => "RenewDelegationToken",
        ApiKey::ExpireDelegationToken => "ExpireDelegationToken",
        ApiKey::DescribeDelegationToken => "DescribeDelegationToken",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::AlterConfigs => "AlterConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::AddPartitionsToTxn => "AddPartitionsToTxn",
        ApiKey::AddOffsetsToTxn => "AddOffsetsToTxn",
        ApiKey::EndTxn => "EndTxn",
        ApiKey::TxnOffsetCommit => "TxnOffsetCommit",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
        ApiKey::ConsumerGroupDescribe => "ConsumerGroupDescribe",
        _ => "Other",
    }
}

/// The span of one request frame (a child of the connection's span, which is current while the
/// connection's task runs). `route` and `enduser.id` are recorded once the framework decided.
pub fn request_span(frame: &[u8]) -> tracing::Span {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "kafka.request",
        otel.name = Empty,
        messaging.system = "kafka",
        messaging.operation.name = Empty,
        kafka.api_key = Empty,
        kafka.api_version = Empty,
        kafka.correlation_id = Empty,
        kafka.client_id = Empty,
        enduser.id = Empty,
        portcullis.route = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Ok((key, version, correlation_id)) = portcullis::protocol::header::peek_ids(frame) {
        let name = api_name(key);
        span.record("otel.name", format!("kafka {name}"));
        span.record("messaging.operation.name", name);
        span.record("kafka.api_key", key);
        span.record("kafka.api_version", version);
        span.record("kafka.correlation_id", correlation_id);
    }
    span
}

/// Records what the framework decided for the request: its principal and where it went
/// (`local`: answered by the gateway; `upstream`: forwarded; `closed`).
pub fn record_decision(span: &tracing::Span, connection: &Connection, actions: &[Action]) {
    if span.is_disabled() {
        return;
    }
    if let Some(session) = connection.session() {
        span.record("enduser.id", tracing::field::display(&session.principal));
        // The connection's span (current while its task runs) names the principal too.
        tracing::Span::current().record("enduser.id", tracing::field::display(&session.principal));
    }
    let route = actions.first().map(|a| match a {
        Action::Forward(_) => "upstream",
        Action::Respond(_) | Action::Persist(_) | Action::Admit(_) => "local",
        Action::Close(_) | Action::CloseAfter(_) | Action::CloseAfterInFlight(_) => "closed",
    });
    if let Some(route) = route {
        span.record("portcullis.route", route);
    }
}

/// A forwarded request on its way upstream: its span and, when metrics are read, its start.
/// Ended (span closed, latency recorded) by [`UpstreamCall::finish`] or when dropped.
#[derive(Debug, Clone)]
pub struct UpstreamCall {
    /// Held, not read: the span ends when the last clone of the call is dropped (the queue
    /// drops it once the response is matched).
    _span: tracing::Span,
    started: Option<Instant>,
    api_key: i16,
}

impl UpstreamCall {
    /// Starts the call for `api_key` sent to `server` under the request span `parent`.
    pub fn start(parent: &tracing::Span, api_key: i16, server: Option<&str>) -> Self {
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            parent: parent,
            "upstream",
            otel.kind = "client",
            messaging.system = "kafka",
            messaging.operation.name = api_name(api_key),
            server.address = server.unwrap_or(""),
        );
        Self {
            _span: span,
            started: super::metrics_enabled().then(Instant::now),
            api_key,
        }
    }

    /// A call that is neither traced nor timed.
    pub fn none() -> Self {
        Self {
            _span: tracing::Span::none(),
            started: None,
            api_key: -1,
        }
    }

    /// The upstream answered: record the latency (the span ends with the last clone).
    pub fn finish(&self) {
        if let Some(started) = self.started {
            instruments().upstream_duration.record(
                started.elapsed().as_secs_f64(),
                &[
                    KeyValue::new("messaging.system", "kafka"),
                    KeyValue::new("messaging.operation.name", api_name(self.api_key)),
                ],
            );
        }
    }
}
