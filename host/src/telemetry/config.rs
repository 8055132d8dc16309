//! `[telemetry]`: where traces and metrics go, and how logs look (docs/observability.md).

use serde::Deserialize;

/// `[telemetry]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `service.name` of every span and metric.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// OTLP/HTTP base URL (`http://127.0.0.1:4318`): traces go to `/v1/traces`, metrics to
    /// `/v1/metrics`. Absent: nothing is exported, and span creation is switched off.
    pub otlp_endpoint: Option<String>,
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

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            service_name: default_service_name(),
            otlp_endpoint: None,
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
                    format!("`{endpoint}` is not an http:// or https:// URL (OTLP/HTTP)"),
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
            otlp_endpoint = "http://127.0.0.1:4318"
            prometheus_address = "127.0.0.1:9464"
            log_format = "json"
            trace_sample_ratio = 0.5
            "#,
        );
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(c.validate().is_ok());
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
