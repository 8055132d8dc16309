#!/usr/bin/env bash
# Counts the system calls a `portcullis serve` makes for a fixed load (docs/benchmarks.md,
# "Connection loop: system calls per request"): starts one Kafka (scripts/lib/kafka.sh) and the
# given portcullis binary in front of it, attaches `strace -f -c`, and has one raw client send N
# ApiVersions (answered locally) then N Metadata requests (forwarded), one at a time.
#
# Usage: scripts/count-syscalls.sh [--requests N] [BINARY]
#   BINARY        default: the debug build of this checkout ($CARGO_TARGET_DIR honoured)
#   --requests N  requests of each kind (default 2000)
# Needs strace. Environment: PORTCULLIS_CACHE, CARGO_TARGET_DIR.

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

requests=2000
BIN=""
while (($#)); do
  case "$1" in
    --requests) requests=${2:?}; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) BIN=$1 ;;
  esac
  shift
done
require_tools strace python3 java
ensure_kafka_deps
ensure_venv
if [[ -z $BIN ]]; then
  cargo build -q -p portcullis-host --bin portcullis
  BIN="$(cargo_target_dir)/debug/portcullis"
fi

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-syscalls.XXXXXX")
PID=
cleanup() {
  [[ -n $PID ]] && stop_pid "$PID" 15
  kafka_stop
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT
KAFKA_REAUTH_MS=0 kafka_start "$RUN_DIR/kafka"
mapfile -t ports < <(free_ports 2)
cat >"$RUN_DIR/portcullis.toml" <<TOML
[node]
id = 1
data_dir = "$RUN_DIR/data"
[listener]
address = "127.0.0.1:${ports[0]}"
advertised_host = "127.0.0.1"
broker_port_base = $((ports[1] - 1))
sasl_mechanisms = ["PLAIN"]
[upstream]
bootstrap_servers = ["$KAFKA_BOOTSTRAP"]
TOML
printf 'syscalls-secret\n' | "$BIN" scram add --config "$RUN_DIR/portcullis.toml" --user alice \
  --mechanism SCRAM-SHA-512 --password-stdin >/dev/null
RUST_LOG=warn "$BIN" serve --config "$RUN_DIR/portcullis.toml" >"$RUN_DIR/portcullis.log" 2>&1 &
PID=$!
wait_for_port 127.0.0.1 "${ports[0]}" 60 "$PID" || die "Portcullis did not start"
strace -f -c -o "$RUN_DIR/strace.txt" -p "$PID" 2>/dev/null &
STRACE=$!
sleep 1
PYTHONPATH=tests/interop "$PORTCULLIS_VENV/bin/python" - "${ports[0]}" "$requests" <<'PY'
import sys
from reauth_support import ReauthConn
port, n = int(sys.argv[1]), int(sys.argv[2])
c = ReauthConn("127.0.0.1", port)
c.api_versions()
c.login_plain("alice", "syscalls-secret")
c.metadata_v1()
for _ in range(n):
    c.api_versions()
for _ in range(n):
    c.metadata_v1()
c.close()
PY
sleep 0.5
kill -INT "$STRACE"
wait "$STRACE" 2>/dev/null || true
echo "system calls of $BIN for $requests local + $requests forwarded requests:"
cat "$RUN_DIR/strace.txt"
