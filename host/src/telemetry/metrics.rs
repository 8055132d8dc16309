//! The gateway's OpenTelemetry instruments (names and units: docs/observability.md). They are
//! made once, from the global meter provider that [`super::init`] installs; before that, or
//! when no reader is configured, they are the API's no-op instruments.

use std::sync::{Arc, OnceLock};

use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableCounter, ObservableGauge};
use opentelemetry::KeyValue;
use portcullis::metrics::{AuthOutcome, SecurityRecorder, SessionClosed, TokenOperation};
use portcullis::reauth::ReauthScheduler;

/// Every instrument the host records.
pub struct Instruments {
    /// `portcullis.authentications`: SASL authentications and re-authentications.
    pub authentications: Counter<u64>,
    /// `portcullis.sessions.closed`: sessions the gateway closed (expired, revoked).
    pub sessions_closed: Counter<u64>,
    /// `portcullis.authorization.decisions`: one per action decided.
    pub authorization_decisions: Counter<u64>,
    /// `portcullis.authorization.duration`: one authorizer call (s).
    pub authorization_duration: Histogram<f64>,
    /// `portcullis.upstream.request.duration`: a forwarded request until its response (s).
    pub upstream_duration: Histogram<f64>,
    /// `portcullis.plugin.load.failures`: plugins refused at start.
    pub plugin_load_failures: Counter<u64>,
    /// `portcullis.delegation_token.operations`: token API calls answered, by operation and outcome.
    pub token_operations: Counter<u64>,
    /// `portcullis.config.reloads`: configuration reloads, by result (`applied`, `refused`).
    pub config_reloads: Counter<u64>,
    meter: Meter,
}

impl Instruments {
    fn new(meter: Meter) -> Self {
        Self {
            authentications: meter
                .u64_counter("portcullis.authentications")
                .with_unit("{authentication}")
                .with_description(
                    "SASL authentications and re-authentications, by mechanism and outcome",
                )
                .build(),
            sessions_closed: meter
                .u64_counter("portcullis.sessions.closed")
                .with_unit("{session}")
                .with_description(
                    "Authenticated sessions closed by the gateway, by reason (expired, revoked)",
                )
                .build(),
            authorization_decisions: meter
                .u64_counter("portcullis.authorization.decisions")
                .with_unit("{decision}")
                .with_description(
                    "Authorization decisions, by resource type, operation and outcome",
                )
                .build(),
            authorization_duration: meter
                .f64_histogram("portcullis.authorization.duration")
                .with_unit("s")
                .with_description("Time of one authorizer call (all the actions of one check)")
                .with_boundaries(vec![
                    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 1e-4, 1e-3, 1e-2,
                ])
                .build(),
            upstream_duration: meter
                .f64_histogram("portcullis.upstream.request.duration")
                .with_unit("s")
                .with_description("Forwarded request to upstream response, by Kafka API")
                .with_boundaries(vec![
                    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
                    1.0, 2.5, 5.0, 10.0,
                ])
                .build(),
            plugin_load_failures: meter
                .u64_counter("portcullis.plugin.load.failures")
                .with_unit("{plugin}")
                .with_description("Dynamic plugins refused when the gateway started")
                .build(),
            token_operations: meter
                .u64_counter("portcullis.delegation_token.operations")
                .with_unit("{operation}")
                .with_description(
                    "Delegation-token API calls answered, by operation (create, renew, expire, describe) and outcome",
                )
                .build(),
            config_reloads: meter
                .u64_counter("portcullis.config.reloads")
                .with_unit("{reload}")
                .with_description(
                    "Configuration reloads (SIGHUP, portcullis reload, a TLS file replaced), by result (applied, refused)",
                )
                .build(),
            meter,
        }
    }
}

/// Counts one configuration reload; `result` is `applied` or `refused`.
pub fn config_reload(result: &'static str) {
    instruments()
        .config_reloads
        .add(1, &[KeyValue::new("result", result)]);
}

static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
static SESSIONS_GAUGE: OnceLock<ObservableGauge<i64>> = OnceLock::new();

/// The process's instruments (made on first use, from the global meter provider).
pub fn instruments() -> &'static Instruments {
    INSTRUMENTS.get_or_init(|| Instruments::new(opentelemetry::global::meter(super::SCOPE)))
}

/// Reports the number of authenticated sessions as `portcullis.sessions.active` (read when the
/// metrics are collected, not on the request path). The first scheduler registered wins.
pub fn observe_active_sessions(sessions: ReauthScheduler) {
    SESSIONS_GAUGE.get_or_init(|| {
        instruments()
            .meter
            .i64_observable_gauge("portcullis.sessions.active")
            .with_unit("{session}")
            .with_description("Authenticated client sessions open now")
            .with_callback(move |observer| {
                observer.observe(i64::try_from(sessions.len()).unwrap_or(i64::MAX), &[])
            })
            .build()
    });
}

/// Feeds the framework's security events into the instruments.
#[derive(Debug, Default, Clone, Copy)]
pub struct OtelRecorder;

impl OtelRecorder {
    /// The recorder as the framework takes it.
    pub fn shared() -> Arc<dyn SecurityRecorder> {
        Arc::new(Self)
    }
}

impl SecurityRecorder for OtelRecorder {
    fn authentication(
        &self,
        mechanism: Option<&str>,
        reauthentication: bool,
        outcome: AuthOutcome,
    ) {
        instruments().authentications.add(
            1,
            &[
                KeyValue::new("sasl.mechanism", mechanism.unwrap_or("unknown").to_owned()),
                KeyValue::new("outcome", outcome.as_str()),
                KeyValue::new("reauthentication", reauthentication),
            ],
        );
    }

    fn session_closed(&self, reason: SessionClosed) {
        instruments()
            .sessions_closed
            .add(1, &[KeyValue::new("reason", reason.as_str())]);
    }

    fn token_operation(&self, operation: TokenOperation, outcome: &'static str) {
        instruments().token_operations.add(
            1,
            &[
                KeyValue::new("operation", operation.as_str()),
                KeyValue::new("outcome", outcome),
            ],
        );
    }
}

static RELAYED_BYTES: OnceLock<ObservableCounter<u64>> = OnceLock::new();

/// Reports `portcullis.relayed` (Prometheus: `portcullis_relayed_bytes_total`): the bytes of unchanged responses relayed to clients, by path
/// (`spliced`: socket to socket, never in Portcullis' memory; `buffered`: read and written), read
/// at collection time from the data path's own counters.
pub fn observe_relayed_bytes() {
    RELAYED_BYTES.get_or_init(|| {
        instruments()
            .meter
            .u64_observable_counter("portcullis.relayed")
            .with_unit("By")
            .with_description(
                "Bytes of unchanged responses relayed to clients, by path (spliced, buffered)",
            )
            .with_callback(|observer| {
                let (spliced, buffered) = crate::server::splice::relayed_bytes();
                observer.observe(spliced, &[KeyValue::new("path", "spliced")]);
                observer.observe(buffered, &[KeyValue::new("path", "buffered")]);
            })
            .build()
    });
}

static PLUGIN_GAUGES: OnceLock<(ObservableGauge<f64>, ObservableCounter<u64>)> = OnceLock::new();

/// Reports what plugins published (`portcullis.plugin.metric`, one series per plugin and name:
/// a counter's or histogram's sum, a gauge's last value) and how event subscribers keep up
/// (`portcullis.event_subscriber.events` by plugin and state), read at collection time.
pub fn observe_plugin_stats(stats: Arc<crate::services::PluginStats>) {
    PLUGIN_GAUGES.get_or_init(|| {
        let meter = &instruments().meter;
        let published = Arc::clone(&stats);
        let gauge = meter
            .f64_observable_gauge("portcullis.plugin.metric")
            .with_description("Values plugins published through the host services (sum, or last for a gauge)")
            .with_callback(move |observer| {
                published.each_metric(|plugin, name, kind, _, value| {
                    observer.observe(
                        value,
                        &[
                            KeyValue::new("plugin", plugin.to_owned()),
                            KeyValue::new("name", name.to_owned()),
                            KeyValue::new("kind", format!("{kind:?}").to_lowercase()),
                        ],
                    );
                });
            })
            .build();
        let counter = meter
            .u64_observable_counter("portcullis.event_subscriber.events")
            .with_unit("{event}")
            .with_description("Events handed to each event subscriber plugin, by state (delivered, dropped, failed)")
            .with_callback(move |observer| {
                for s in stats.subscribers() {
                    for (state, count) in [
                        ("delivered", &s.delivered),
                        ("dropped", &s.dropped),
                        ("failed", &s.failed),
                    ] {
                        observer.observe(
                            count.load(std::sync::atomic::Ordering::Relaxed),
                            &[
                                KeyValue::new("plugin", s.plugin.clone()),
                                KeyValue::new("state", state),
                            ],
                        );
                    }
                }
            })
            .build();
        (gauge, counter)
    });
}

/// Registers a node's observed instruments and counts its refused plugins (once per node).
pub fn record_node(
    sessions: &ReauthScheduler,
    stats: &Arc<crate::services::PluginStats>,
    plugins: &crate::plugin_loader::PluginLoadReport,
) {
    observe_active_sessions(sessions.clone());
    observe_plugin_stats(Arc::clone(stats));
    observe_relayed_bytes();
    let refused = u64::try_from(plugins.refused.len()).unwrap_or(u64::MAX);
    if refused > 0 {
        instruments().plugin_load_failures.add(refused, &[]);
    }
}
