//! `[telemetry]`: where traces and metrics go, and how logs look (docs/observability.md).

use serde::Deserialize;

/// `[telemetry]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `service.name` of every span and metric.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// The OTLP receiver's URL. With `otlp_protocol = "grpc"` the gRPC endpoint
    /// (`http://127.0.0.1:4317`); with `"http/protobuf"` the OTLP/HTTP base URL
    /// (`http://127.0.0.1:4318`), under which traces go to `/v1/traces` and metrics to
    /// `/v1/metrics`. Absent: nothing is exported, and span creation is switched off.
    pub otlp_endpoint: Option<String>,
    /// How spans and metrics travel to `otlp_endpoint` (the values of the OpenTelemetry
    /// specification's `OTEL_EXPORTER_OTLP_PROTOCOL`, of which `http/json` is not offered).
    #[serde(default)]
    pub otlp_protocol: OtlpProtocol,
    /// `IP:PORT` of the admin endpoint (`/metrics`, `/healthz`, `/readyz`). Absent: none.
    pub prometheus_address: Option<String>,
    /// Log lines as human-readable text or one JSON object per line.
    #[serde(default)]
    pub log_format: LogFormat,
    /// The share of traces kept, 0.0 to 1.0 (head sampling on the connection span).
    #[serde(default = "default_sample_ratio")]
    pub trace_sample_ratio: f64,
    /// How often metrics are pushed over OTLP (ms).
    #[serde(default = "default_export_interval_ms")]
    pub metrics_export_interval_ms: u64,
}

/// `telemetry.log_format`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `telemetry.otlp_protocol`.
///
/// The default is `http/protobuf`: the OpenTelemetry specification names it the default transport
/// of OTLP exporters (SDK environment variable `OTEL_EXPORTER_OTLP_PROTOCOL`), and it is what
/// every configuration written before this key existed meant (their endpoints are OTLP/HTTP
/// ports). A 4317 endpoint therefore needs `otlp_protocol = "grpc"` (see [`Self::mismatch`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (`grpc`, usually port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`, usually port 4318).
    #[default]
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The configuration spelling (the specification's `OTEL_EXPORTER_OTLP_PROTOCOL` values).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::HttpProtobuf => "http/protobuf",
        }
    }

    /// A warning when `endpoint` names the well-known port of the other protocol (4317 is
    /// OTLP/gRPC, 4318 OTLP/HTTP): likely a configuration mistake, yet a receiver may listen
    /// anywhere, so this is logged, not refused.
    pub fn mismatch(self, endpoint: &str) -> Option<String> {
        let (other, port) = match self {
            Self::Grpc => ("http/protobuf", ":4318"),
            Self::HttpProtobuf => ("grpc", ":4317"),
        };
        let authority = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or("");
        authority.ends_with(port).then(|| {
            format!(
                "telemetry.otlp_endpoint `{endpoint}` is the usual {other} port but \
                 otlp_protocol is \"{}\"; set otlp_protocol = \"{other}\" if the receiver \
                 speaks {other}",
                self.as_str()
            )
        })
    }
}

impl<'de> Deserialize<'de> for OtlpProtocol {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // By hand, not `rename`: the error must list the accepted values and say why
        // `http/json` (a valid value of the specification) is refused.
        let value = String::deserialize(deserializer)?;
        match value.as_str() {
            "grpc" => Ok(Self::Grpc),
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "http/json" => Err(serde::de::Error::custom(
                "otlp_protocol `http/json` is not supported; use \"grpc\" or \"http/protobuf\"",
            )),
            other => Err(serde::de::Error::custom(format!(
                "unknown otlp_protocol `{other}`; expected \"grpc\" or \"http/protobuf\""
            ))),
        }
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            service_name: default_service_name(),
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::default(),
            prometheus_address: None,
            log_format: LogFormat::default(),
            trace_sample_ratio: default_sample_ratio(),
            metrics_export_interval_ms: default_export_interval_ms(),
        }
    }
}

impl TelemetryConfig {
    /// Checks what serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(0.0..=1.0).contains(&self.trace_sample_ratio) {
            return Err((
                "telemetry.trace_sample_ratio",
                "must be between 0.0 and 1.0".to_owned(),
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(("telemetry.service_name", "must not be empty".to_owned()));
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err((
                    "telemetry.otlp_endpoint",
                    format!(
                        "`{endpoint}` is not an http:// or https:// URL (OTLP over {})",
                        self.otlp_protocol.as_str()
                    ),
                ));
            }
            // The gRPC exporter is built without a TLS stack (no rustls in the exporter): an
            // https:// endpoint would fail at every export, so refuse it here.
            if self.otlp_protocol == OtlpProtocol::Grpc && endpoint.starts_with("https://") {
                return Err((
                    "telemetry.otlp_endpoint",
                    format!(
                        "`{endpoint}`: OTLP/gRPC export supports http:// only; use a local \
                         collector, or otlp_protocol = \"http/protobuf\" for https://"
                    ),
                ));
            }
        }
        if let Some(address) = &self.prometheus_address {
            if address.parse::<std::net::SocketAddr>().is_err() {
                return Err((
                    "telemetry.prometheus_address",
                    format!("`{address}` is not IP:PORT"),
                ));
            }
        }
        if self.metrics_export_interval_ms == 0 {
            return Err((
                "telemetry.metrics_export_interval_ms",
                "must be positive".to_owned(),
            ));
        }
        Ok(())
    }
}

fn default_service_name() -> String {
    "portcullis".to_owned()
}
fn default_sample_ratio() -> f64 {
    1.0
}
fn default_export_interval_ms() -> u64 {
    10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> TelemetryConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_export_nothing() {
        let c = parse("");
        assert_eq!(c, TelemetryConfig::default());
        assert_eq!(c.otlp_endpoint, None);
        assert_eq!(c.prometheus_address, None);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn the_issue_example_parses() {
        let c = parse(
            r#"
            service_name = "gw"
            otlp_endpoint = "http://127.0.0.1:4317"
            prometheus_address = "127.0.0.1:9464"
            log_format = "json"
            trace_sample_ratio = 0.5
            "#,
        );
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.otlp_protocol, OtlpProtocol::HttpProtobuf, "the default");
        assert!(c.validate().is_ok());
        assert!(c.otlp_protocol.mismatch("http://127.0.0.1:4317").is_some());
        assert!(c.otlp_protocol.mismatch("http://127.0.0.1:4318/").is_none());
        assert!(OtlpProtocol::Grpc.mismatch("http://[::1]:4318").is_some());
        assert!(OtlpProtocol::Grpc
            .mismatch("http://127.0.0.1:43170")
            .is_none());
    }

    #[test]
    fn both_otlp_protocols_parse() {
        assert_eq!(
            parse("otlp_protocol = \"grpc\"").otlp_protocol,
            OtlpProtocol::Grpc
        );
        let http =
            parse("otlp_protocol = \"http/protobuf\"\notlp_endpoint = \"https://collector:4318\"");
        assert_eq!(http.otlp_protocol, OtlpProtocol::HttpProtobuf);
        assert!(http.validate().is_ok());
    }

    #[test]
    fn an_unknown_otlp_protocol_is_a_clear_error() {
        let error = toml::from_str::<TelemetryConfig>("otlp_protocol = \"udp\"")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("unknown otlp_protocol `udp`; expected \"grpc\" or \"http/protobuf\""),
            "{error}"
        );
        let error = toml::from_str::<TelemetryConfig>("otlp_protocol = \"http/json\"")
            .unwrap_err()
            .to_string();
        assert!(error.contains("`http/json` is not supported"), "{error}");
        assert!(toml::from_str::<TelemetryConfig>("otlp_protocol = 4317").is_err());
    }

    #[test]
    fn grpc_refuses_https() {
        let c = parse("otlp_protocol = \"grpc\"\notlp_endpoint = \"https://collector:4317\"");
        assert_eq!(c.validate().unwrap_err().0, "telemetry.otlp_endpoint");
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |text: &str| parse(text).validate().unwrap_err().0;
        assert_eq!(
            bad("trace_sample_ratio = 1.5"),
            "telemetry.trace_sample_ratio"
        );
        assert_eq!(
            bad("otlp_endpoint = \"127.0.0.1:4317\""),
            "telemetry.otlp_endpoint"
        );
        assert_eq!(
            bad("prometheus_address = \"localhost\""),
            "telemetry.prometheus_address"
        );
        assert!(toml::from_str::<TelemetryConfig>("log_format = \"xml\"").is_err());
        assert!(toml::from_str::<TelemetryConfig>("unknown = 1").is_err());
    }
}
