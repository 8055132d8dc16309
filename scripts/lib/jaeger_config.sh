# shellcheck shell=bash
# The configuration of a local Jaeger v2 (scripts/lib/jaeger.sh builds it) for the scripts that
# trace Portcullis: an OTLP/HTTP receiver, in-memory storage, the HTTP query API, its own
# telemetry off, everything on loopback. Source it, then
#
#   jaeger_config QUERY_HTTP_PORT QUERY_GRPC_PORT OTLP_HTTP_PORT MAX_TRACES >jaeger.yaml
#
# and start the binary with `OTEL_TRACES_EXPORTER=none "$jaeger" --config jaeger.yaml` (its own
# traces would go to a default OTLP endpoint that is not there).

jaeger_config() {
  local query_http=$1 query_grpc=$2 otlp_http=$3 max_traces=$4
  cat <<YAML
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:$query_http
    grpc:
      endpoint: 127.0.0.1:$query_grpc
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: $max_traces
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$otlp_http
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
YAML
}
