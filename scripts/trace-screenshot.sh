#!/usr/bin/env bash
# Screenshots Portcullis' traces in a real tracing UI (docs/observability.md, "A trace in a tracing
# UI"): starts Jaeger (OTLP receiver, scripts/lib/jaeger.sh), Zipkin (its UI, scripts/lib/zipkin.sh),
# a local Apache Kafka and one Portcullis node (examples/quickstart.toml plus an ACL authorizer)
# exporting every trace (`trace_sample_ratio = 1.0`)
# over OTLP/HTTP to Jaeger; a confluent-kafka producer logs in with SCRAM-SHA-512 and produces one
# record. Once Jaeger has the traces, scripts/lib/jaeger_to_zipkin.py copies them into Zipkin
# (the Jaeger built from its Go module has no UI, only a placeholder page), and headless Chromium
# photographs Zipkin's trace page twice, with a span selected (scripts/lib/cdp_screenshot.mjs):
#
#   docs/images/trace-produce.png     the producing connection's trace, `kafka Produce` selected
#   docs/images/trace-sasl-login.png  the bootstrap connection's trace, `sasl.authenticate` selected
#
# Usage: scripts/trace-screenshot.sh [OUT_DIR]   (default docs/images)
# Needs cargo, java, mvn, go (first run: builds Jaeger), node, python3, chromium (installed with
# apt-get when missing), optipng (optional: shrinks the PNGs). Loopback only; ports are chosen
# free at run time; everything stops on exit.

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/common.sh
source scripts/lib/common.sh
# shellcheck source=lib/kafka-deps.sh
source scripts/lib/kafka-deps.sh
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
# shellcheck source=lib/kafka.sh
source scripts/lib/kafka.sh
# shellcheck source=lib/jaeger_config.sh
source scripts/lib/jaeger_config.sh

OUT_DIR=${1:-docs/images}
SERVICE=portcullis
USER_NAME=alice
USER_PASSWORD=trace-secret
TOPIC=traced
RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-trace-shot.XXXXXX")
PORTCULLIS_PID='' JAEGER_PID='' ZIPKIN_PID='' CHROMIUM_PID=''
ok=0

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local name pid
  for name in CHROMIUM PORTCULLIS ZIPKIN JAEGER; do
    pid=${name}_PID
    pid=${!pid}
    [[ -n "$pid" ]] && stop_pid "$pid" 15
  done
  kafka_stop
  if ((ok)) && ((rc == 0)); then
    rm -rf "$RUN_DIR"
  else
    for f in portcullis.log jaeger.log zipkin.log chromium.log; do
      [[ -f "$RUN_DIR/$f" ]] || continue
      log "---- $RUN_DIR/$f ----"
      tail -n 40 "$RUN_DIR/$f" >&2
    done
    log "trace-screenshot failed; logs kept in $RUN_DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

require_tools cargo java mvn go node python3
if ! command -v chromium >/dev/null 2>&1; then
  log "chromium missing: installing it with apt-get"
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq chromium >/dev/null
fi
ensure_kafka_deps
ensure_venv
JAEGER_BIN=$(scripts/lib/jaeger.sh)
ZIPKIN_JAR=$(scripts/lib/zipkin.sh)

log "building portcullis"
cargo build -q -p portcullis-host
BIN="$(cargo_target_dir)/debug/portcullis"
[[ -x "$BIN" ]] || die "no portcullis binary at $BIN"

# ---- Jaeger: OTLP/HTTP receiver, in-memory store, HTTP query API ----
mapfile -t ports < <(free_ports 3)
JAEGER_QUERY_PORT=${ports[0]} JAEGER_QUERY_GRPC_PORT=${ports[1]} OTLP_HTTP_PORT=${ports[2]}
jaeger_config "$JAEGER_QUERY_PORT" "$JAEGER_QUERY_GRPC_PORT" "$OTLP_HTTP_PORT" 1000 >"$RUN_DIR/jaeger.yaml"
log "starting Jaeger (query 127.0.0.1:$JAEGER_QUERY_PORT, OTLP/HTTP 127.0.0.1:$OTLP_HTTP_PORT)"
# Jaeger's own traces would go to a default OTLP endpoint that is not there.
OTEL_TRACES_EXPORTER=none "$JAEGER_BIN" --config "$RUN_DIR/jaeger.yaml" >"$RUN_DIR/jaeger.log" 2>&1 &
JAEGER_PID=$!
wait_for_port 127.0.0.1 "$JAEGER_QUERY_PORT" 60 "$JAEGER_PID" || die "Jaeger did not start"
wait_for_port 127.0.0.1 "$OTLP_HTTP_PORT" 60 "$JAEGER_PID" || die "Jaeger's OTLP receiver did not start"

# ---- Zipkin: in-memory storage, UI at /zipkin/ ----
ZIPKIN_PORT=$(free_ports 1)
log "starting Zipkin on 127.0.0.1:$ZIPKIN_PORT"
java -Xms64m -Xmx384m -jar "$ZIPKIN_JAR" "--armeria.ports[0].ip=127.0.0.1" \
  "--armeria.ports[0].port=$ZIPKIN_PORT" "--armeria.ports[0].protocols=http" \
  >"$RUN_DIR/zipkin.log" 2>&1 &
ZIPKIN_PID=$!
wait_for_port 127.0.0.1 "$ZIPKIN_PORT" 90 "$ZIPKIN_PID" || die "Zipkin did not start"

# ---- Kafka and Portcullis ----
kafka_start "$RUN_DIR/kafka"
mapfile -t ports < <(free_ports 2)
LISTENER_PORT=${ports[0]} BROKER_PORT=${ports[1]}
CONFIG=$RUN_DIR/portcullis.toml
# examples/quickstart.toml has no authorizer (every request allowed, no `authorize` span); the
# ACL authorizer with the user as a super user adds that span, decided by rule `super_user`.
cat examples/quickstart.toml - >"$CONFIG" <<EOT

[authorizer]
plugin = "acl"
super_users = ["User:$USER_NAME"]

[telemetry]
service_name = "$SERVICE"
otlp_endpoint = "http://127.0.0.1:$OTLP_HTTP_PORT"
otlp_protocol = "http/protobuf"
trace_sample_ratio = 1.0
EOT
export PORTCULLIS_NODE__DATA_DIR="$RUN_DIR/data"
export PORTCULLIS_PLUGINS__DIR="$RUN_DIR/plugins"
export PORTCULLIS_LISTENER__ADDRESS="127.0.0.1:$LISTENER_PORT"
export PORTCULLIS_LISTENER__BROKER_PORT_BASE=$((BROKER_PORT - 1))
export PORTCULLIS_UPSTREAM__BOOTSTRAP_SERVERS="[$KAFKA_BOOTSTRAP]"
BOOTSTRAP="127.0.0.1:$LISTENER_PORT"
"$BIN" check-config --config "$CONFIG" >/dev/null
printf '%s\n' "$USER_PASSWORD" |
  "$BIN" scram add --config "$CONFIG" --user "$USER_NAME" --mechanism SCRAM-SHA-512 --password-stdin >/dev/null
log "starting Portcullis on $BOOTSTRAP (broker 1 at 127.0.0.1:$BROKER_PORT), exporting traces to Jaeger"
RUST_LOG=${RUST_LOG:-info} "$BIN" serve --config "$CONFIG" >"$RUN_DIR/portcullis.log" 2>&1 &
PORTCULLIS_PID=$!
wait_for_port 127.0.0.1 "$LISTENER_PORT" 30 "$PORTCULLIS_PID" || die "Portcullis did not start"
wait_for_port 127.0.0.1 "$BROKER_PORT" 30 "$PORTCULLIS_PID" || die "Portcullis did not open broker 1's port"

# ---- one SCRAM login and one produce ----
# The topic is made straight on Kafka (untraced), so the producer's one Produce request finds it.
log "producing one record to '$TOPIC' as $USER_NAME (SCRAM-SHA-512) through Portcullis"
"$PORTCULLIS_VENV/bin/python" - "$KAFKA_BOOTSTRAP" "$BOOTSTRAP" "$USER_NAME" "$USER_PASSWORD" "$TOPIC" <<'PY'
import sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
kafka, bootstrap, user, password, topic = sys.argv[1:]
admin = AdminClient({"bootstrap.servers": kafka})
admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
              "client.id": "trace-screenshot", "acks": "all", "linger.ms": 0})
delivered = []
p.produce(topic, b"hello, traced", on_delivery=lambda err, msg: delivered.append(err))
if p.flush(30) != 0 or delivered != [None]:
    sys.exit(f"the record was not delivered: {delivered}")
del p  # closes the connections, which ends (and exports) their kafka.connection spans
print("    delivered 1 record")
PY

# ---- traces: Jaeger -> Zipkin ----
log "waiting for the traces in Jaeger, copying them into Zipkin"
scripts/lib/jaeger_to_zipkin.py "http://127.0.0.1:$JAEGER_QUERY_PORT" "http://127.0.0.1:$ZIPKIN_PORT" \
  "$SERVICE" 60 >"$RUN_DIR/traces.txt"
sed 's/^/    /' "$RUN_DIR/traces.txt" >&2
PRODUCE_TRACE=$(awk '$1 == "produce" { print $2 }' "$RUN_DIR/traces.txt")
LOGIN_TRACE=$(awk '$1 == "login" { print $2 }' "$RUN_DIR/traces.txt")
[[ -n "$PRODUCE_TRACE" && -n "$LOGIN_TRACE" ]] || die "no trace ids in $RUN_DIR/traces.txt"

# ---- screenshots ----
DEBUG_PORT=$(free_ports 1)
chromium --headless=new --no-sandbox --disable-gpu --window-size=1600,1000 --hide-scrollbars \
  --no-first-run --no-default-browser-check --user-data-dir="$RUN_DIR/chromium" \
  --remote-debugging-address=127.0.0.1 --remote-debugging-port="$DEBUG_PORT" about:blank \
  >"$RUN_DIR/chromium.log" 2>&1 &
CHROMIUM_PID=$!
wait_for_port 127.0.0.1 "$DEBUG_PORT" 30 "$CHROMIUM_PID" || die "Chromium did not start"
mkdir -p "$OUT_DIR"
shoot() { # TRACE_ID SPAN_NAME FILE
  node --experimental-websocket --no-warnings scripts/lib/cdp_screenshot.mjs "$DEBUG_PORT" \
    "http://127.0.0.1:$ZIPKIN_PORT/zipkin/traces/$1" "$2" "$3" | sed 's/^/    /' >&2
  ((PIPESTATUS[0] == 0)) || die "screenshot of trace $1 failed"
  if command -v optipng >/dev/null 2>&1; then
    optipng -quiet -o2 -strip all "$3"
  fi
}
log "photographing Zipkin's trace pages with headless Chromium"
shoot "$PRODUCE_TRACE" "kafka Produce" "$OUT_DIR/trace-produce.png"
shoot "$LOGIN_TRACE" "sasl.authenticate" "$OUT_DIR/trace-sasl-login.png"
stat -c '    %n: %s bytes' "$OUT_DIR/trace-produce.png" "$OUT_DIR/trace-sasl-login.png" >&2
ok=1
log "done: produce trace $PRODUCE_TRACE, login trace $LOGIN_TRACE"
