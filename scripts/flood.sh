#!/usr/bin/env bash
# What floods of idle, slow and failing connections cost, and whether a legitimate client still
# logs in and produces during each (issue 7 §5): starts one Kafka 4.4 (scripts/lib/kafka.sh) and one
# release Portcullis in front of it with the default limits, then runs scripts/flood.py, which floods
# Portcullis from 127.0.0.2 while a fresh librdkafka producer logs in (SCRAM-SHA-512 and PLAIN) and
# produces one record from 127.0.0.1, and compares the password-guessing rates with Kafka's own SASL
# listener. Prints a Markdown table (also results.md in the run directory) and stops what it started.
#
# Usage: scripts/flood.sh [--scenarios LIST] [--binary PATH] [--keep]
#   --scenarios LIST  name:count,... (default: idle-unauthenticated:5000,idle-authenticated:5000,
#                     slow-senders:2000,large-frames:500,scram-guessing:50,plain-guessing:50,
#                     plain-storm:50; see scripts/flood.py)
#   --binary PATH     measure this portcullis binary instead of this checkout's release build
#   --limits TOML     extra keys for the node's [limits] table, e.g. 'authentication_timeout_ms = 600000'
#                     (to measure what held connections cost, before the deadline closes them)
#   --ramp S          seconds a flood builds up before the measurement (default 8; 10,000 PLAIN
#                     logins, each a PBKDF2 on one SASL thread, need about a minute)
#   --keep            keep the run directory (configs, logs) on success too
# Environment: PORTCULLIS_CACHE (default ~/.cache/portcullis), CARGO_TARGET_DIR.

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

scenarios=""
limits=""
ramp=8
BIN=""
keep=0
while (($#)); do
  case "$1" in
    --scenarios) scenarios=${2:?}; shift ;;
    --binary) BIN=${2:?}; shift ;;
    --limits) limits=${2:?}; shift ;;
    --ramp) ramp=${2:?}; shift ;;
    --keep) keep=1 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-flood.XXXXXX")
PORTCULLIS_PID=
ok=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -n "$PORTCULLIS_PID" ]] && stop_pid "$PORTCULLIS_PID" 15
  kafka_stop
  if ((ok)) && ((!keep)); then rm -rf "$RUN_DIR"; else log "run directory kept: $RUN_DIR"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

require_tools cargo java python3
ensure_kafka_deps
ensure_venv
if [[ -z $BIN ]]; then
  log "building the release binary"
  cargo build -q --release -p portcullis-host --bin portcullis
  BIN="$(cargo_target_dir)/release/portcullis"
fi

KAFKA_HEAP_OPTS="-Xms512m -Xmx1g" KAFKA_REAUTH_MS=0 kafka_start "$RUN_DIR/kafka"

mapfile -t ports < <(free_ports 2)
USER_NAME=alice
USER_PASSWORD=flood-legitimate-secret
cat >"$RUN_DIR/portcullis.toml" <<TOML
[node]
id = 1
data_dir = "$RUN_DIR/data"

[listener]
address = "127.0.0.1:${ports[0]}"
advertised_host = "127.0.0.1"
broker_port_base = $((ports[1] - 1))
sasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]

[upstream]
bootstrap_servers = ["$KAFKA_BOOTSTRAP"]
TOML
[[ -n $limits ]] && printf '\n[limits]\n%s\n' "$limits" >>"$RUN_DIR/portcullis.toml"
printf '%s\n' "$USER_PASSWORD" |
  "$BIN" scram add --config "$RUN_DIR/portcullis.toml" --user "$USER_NAME" --mechanism SCRAM-SHA-512 --password-stdin

# A fresh Portcullis for each scenario, so its memory figures are its own (a process keeps the
# memory it freed).
start_portcullis() {
  RUST_LOG=warn "$BIN" serve --config "$RUN_DIR/portcullis.toml" >>"$RUN_DIR/portcullis.log" 2>&1 &
  PORTCULLIS_PID=$!
  wait_for_port 127.0.0.1 "${ports[0]}" 60 "$PORTCULLIS_PID" || die "Portcullis did not start"
}

: "${scenarios:=idle-unauthenticated:5000,idle-authenticated:5000,slow-senders:2000,large-frames:500,scram-guessing:50,plain-guessing:50,plain-storm:50}"
log "flooding (this takes a few minutes)"
common=(--port "${ports[0]}" --user "$USER_NAME" --password "$USER_PASSWORD" --topic flood-legitimate
  --kafka-port "${KAFKA_SASL_BOOTSTRAP##*:}" --kafka-user "$KAFKA_SASL_USER" --kafka-bootstrap "$KAFKA_BOOTSTRAP")
first=1
IFS=, read -r -a list <<<"$scenarios"
for scenario in "${list[@]}"; do
  start_portcullis
  extra=(--no-baseline)
  if ((first)); then extra=(--header); fi
  "$PORTCULLIS_VENV/bin/python" scripts/flood.py "${common[@]}" --pid "$PORTCULLIS_PID" \
    --scenarios "$scenario" --ramp "$ramp" --json "$RUN_DIR/${scenario%%:*}.json" "${extra[@]}" | tee -a "$RUN_DIR/results.md"
  stop_pid "$PORTCULLIS_PID" 15
  PORTCULLIS_PID=
  first=0
done
echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); $(uname -sr)"
ok=1
