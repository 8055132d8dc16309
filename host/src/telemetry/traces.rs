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
    api_names(api_key).0
}

/// A request span's name (`kafka Produce`): a constant, so naming a span formats nothing.
pub fn request_span_name(api_key: i16) -> &'static str {
    api_names(api_key).1
}

/// The API's name and its request span's name.
fn api_names(api_key: i16) -> (&'static str, &'static str) {
    match ApiKey::try_from(api_key) {
        Ok(key) => api_key_names(key),
        Err(()) => ("Unknown", "kafka Unknown"),
    }
}

/// `ApiKey::X => ("X", "kafka X")` for each API listed; `Other` for the rest.
macro_rules! api_key_names {
    ($($key:ident),* $(,)?) => {
        fn api_key_names(key: ApiKey) -> (&'static str, &'static str) {
            // kafka-protocol names its keys after the messages.
            match key {
                $(ApiKey::$key => (stringify!($key), concat!("kafka ", stringify!($key))),)*
                _ => ("Other", "kafka Other"),
            }
        }
    };
}

api_key_names!(
    Produce,
    Fetch,
    ListOffsets,
    Metadata,
    OffsetCommit,
    OffsetFetch,
    FindCoordinator,
    JoinGroup,
    Heartbeat,
    LeaveGroup,
    SyncGroup,
    DescribeGroups,
    ListGroups,
    SaslHandshake,
    ApiVersions,
    CreateTopics,
    DeleteTopics,
    InitProducerId,
    SaslAuthenticate,
    DescribeAcls,
    CreateAcls,
    DeleteAcls,
    CreateDelegationToken,
    RenewDelegationToken,
    ExpireDelegationToken,
    DescribeDelegationToken,
    DescribeUserScramCredentials,
    AlterUserScramCredentials,
    DescribeCluster,
    DescribeConfigs,
    AlterConfigs,
    CreatePartitions,
    DeleteRecords,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
    TxnOffsetCommit,
    OffsetForLeaderEpoch,
    ConsumerGroupHeartbeat,
    ConsumerGroupDescribe,
);

/// The span of one request frame (a child of the connection's span, which is current while the
/// connection's task runs). `route` and `enduser.id` are recorded once the framework decided.
/// The frame's ids are read first, so the span is made with its values in one go (one visit by
/// the OpenTelemetry layer instead of one per recorded field); with export off, the `enabled!`
/// check (a cached callsite, like the span's own) returns before the frame is looked at.
pub fn request_span(frame: &[u8]) -> tracing::Span {
    if !tracing::enabled!(target: SPAN_TARGET, tracing::Level::INFO) {
        return tracing::Span::none();
    }
    match portcullis::protocol::header::peek_ids(frame) {
        Ok((key, version, correlation_id)) => tracing::info_span!(
            target: SPAN_TARGET,
            "kafka.request",
            otel.name = request_span_name(key),
            messaging.system = "kafka",
            messaging.operation.name = api_name(key),
            kafka.api_key = key,
            kafka.api_version = version,
            kafka.correlation_id = correlation_id,
            enduser.id = Empty,
            portcullis.route = Empty,
        ),
        // A frame too short for a header: the framework answers or closes; the span says so.
        Err(_) => tracing::info_span!(
            target: SPAN_TARGET,
            "kafka.request",
            messaging.system = "kafka",
            enduser.id = Empty,
            portcullis.route = Empty,
        ),
    }
}

/// Records what the framework decided for the request: its principal and where it went
/// (`local`: answered by the gateway; `upstream`: forwarded; `closed`).
///
/// `newly_authenticated`: this request completed the connection's first authentication; only
/// then is the principal recorded on the connection's span too (a re-authentication keeps the
/// principal, KIP-368), not on every request.
pub fn record_decision(
    span: &tracing::Span,
    connection: &Connection,
    actions: &[Action],
    newly_authenticated: bool,
) {
    if span.is_disabled() {
        return;
    }
    if let Some(session) = connection.session() {
        span.record("enduser.id", tracing::field::display(&session.principal));
        if newly_authenticated {
            // The connection's span (current while its task runs) names the principal too.
            tracing::Span::current()
                .record("enduser.id", tracing::field::display(&session.principal));
        }
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
    /// The `upstream` span; closed when the last clone of the call is dropped (the queue drops
    /// it once the response is matched).
    span: tracing::Span,
    /// The request span it belongs to. tracing-opentelemetry ends a span at its *last exit*,
    /// not when it closes, and the request span was last exited when the request was forwarded:
    /// [`UpstreamCall::finish`] enters and leaves it once more, so the request span ends when its
    /// response is matched and one request reads as one subtree.
    request: tracing::Span,
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
            span,
            request: parent.clone(),
            started: super::metrics_enabled().then(Instant::now),
            api_key,
        }
    }

    /// A call that is neither traced nor timed.
    pub fn none() -> Self {
        Self {
            span: tracing::Span::none(),
            request: tracing::Span::none(),
            started: None,
            api_key: -1,
        }
    }

    /// The upstream answered: both spans end now (see `request`), and the latency is recorded.
    pub fn finish(&self) {
        self.span.in_scope(|| {});
        self.request.in_scope(|| {});
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
