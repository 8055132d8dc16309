#!/usr/bin/env bash
# Does a reload pause the data path? (issue 23: "p99 produce latency during reloads within 2 ms of
# without"). One Portcullis (TLS listener, SCRAM, the `acl` authorizer) in front of one Kafka 4.4
# (scripts/lib/kafka.sh); a real Java producer (benches/datapath/DatapathTool.java `latency`: an
# open-loop producer at a fixed rate, acks=1, with a consumer; its ack latency is the produce
# latency) runs for --seconds, alternately
#   quiet   no reload;
#   reload  the configuration file rewritten and SIGHUP sent every --interval seconds, each time
#           changing `[authorizer] super_users`, `[limits] max_connections` and the listener's
#           certificate and key (two certificates of one CA, alternating: a rotation),
# in --rounds interleaved rounds (the order swaps each round), on the same node and connections.
# Every reload of a reload run must be applied (counted in the node's log), or the run fails.
# Prints per run and over the rounds (median) the produce latency p50 / p99 / max in ms, and the
# difference of the p99s against the 2 ms target. Also saved under $CARGO_TARGET_DIR/bench/.
#
# Usage: scripts/bench-reload.sh [options]
#   --rounds N          interleaved rounds (default 3)
#   --rate R            records/s (default 1000)
#   --seconds S         measured seconds per run (default 30)
#   --warmup S          unmeasured seconds before them (default 5)
#   --record-size B     bytes per record (default 1024)
#   --interval S        seconds between reloads in a reload run (default 1)
#   --portcullis-bin P  use this binary instead of building the release one
#   --keep              keep the run directory
# Environment: PORTCULLIS_CACHE (default ~/.cache/portcullis), CARGO_TARGET_DIR.

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/common.sh
source scripts/lib/common.sh
# shellcheck source=lib/kafka-deps.sh
source scripts/lib/kafka-deps.sh
# shellcheck source=lib/kafka.sh
source scripts/lib/kafka.sh
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh

rounds=3
rate=1000
seconds=30
warmup=5
record_size=1024
interval=1
portcullis_bin=
keep=0
args=("$@")
while (($#)); do
  case "$1" in
    --rounds) rounds=${2:?}; shift ;;
    --rate) rate=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --warmup) warmup=${2:?}; shift ;;
    --record-size) record_size=${2:?}; shift ;;
    --interval) interval=${2:?}; shift ;;
    --portcullis-bin) portcullis_bin=${2:?}; shift ;;
    --keep) keep=1 ;;
    -h | --help) sed -n '2,/^# Environment/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
for n in rounds rate seconds record_size; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "--${n//_/-} must be a positive integer"
done
[[ $warmup =~ ^[0-9]+$ ]] || die "--warmup must be a non-negative integer"
[[ $interval =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--interval must be a number of seconds"

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-reload-bench.XXXXXX")
TARGET_DIR=$(cargo_target_dir)
PORTCULLIS_PID=
RELOADER_PID=

cleanup() {
  local rc=$?
  [[ -n $RELOADER_PID ]] && kill "$RELOADER_PID" 2>/dev/null && wait "$RELOADER_PID" 2>/dev/null
  [[ -n $PORTCULLIS_PID ]] && stop_pid "$PORTCULLIS_PID" 15
  kafka_stop
  if ((rc != 0)); then
    kafka_dump_log 40
    [[ -f $RUN_DIR/portcullis/portcullis.log ]] && tail -n 40 "$RUN_DIR/portcullis/portcullis.log" >&2
    log "run directory kept: $RUN_DIR"
  elif ((keep)); then
    log "run directory kept: $RUN_DIR"
  else
    rm -rf "$RUN_DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# 1. Binaries

if [[ -z $portcullis_bin ]]; then
  log "=== building the release binary"
  cargo build --release -p portcullis-host --bin portcullis
  portcullis_bin=$TARGET_DIR/release/portcullis
fi
[[ -x $portcullis_bin ]] || die "no portcullis binary at $portcullis_bin"
require_tools java javac python3 openssl
ensure_kafka_deps
TOOL_SRC=benches/datapath/DatapathTool.java
tool_hash=$( (sha256sum "$TOOL_SRC"; ls "$KAFKA_LIB") | sha256sum | cut -c1-16)
TOOL_CLASSES=$PORTCULLIS_CACHE/bench-java/$tool_hash
if [[ ! -f $TOOL_CLASSES/.complete ]]; then
  log "compiling $TOOL_SRC"
  rm -rf "$TOOL_CLASSES.tmp$$" && mkdir -p "$TOOL_CLASSES.tmp$$"
  javac -nowarn -cp "$KAFKA_LIB/*" -d "$TOOL_CLASSES.tmp$$" "$TOOL_SRC"
  touch "$TOOL_CLASSES.tmp$$/.complete"
  rm -rf "$TOOL_CLASSES" && mv "$TOOL_CLASSES.tmp$$" "$TOOL_CLASSES"
fi

# ---------------------------------------------------------------------------------------------
# 2. Kafka, two listener certificates, Portcullis

kafka_start "$RUN_DIR/kafka"
TLS=$RUN_DIR/tls
mkdir -p "$TLS"
# Two server certificates for 127.0.0.1 from Kafka's test CA: the reloads alternate them.
for which in a b; do
  (
    cd "$TLS"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$which.key" 2>/dev/null
    openssl req -new -key "$which.key" -subj "/CN=portcullis-$which" -out "$which.csr"
    openssl x509 -req -in "$which.csr" -CA "$KAFKA_TLS_CA" -CAkey "$(dirname "$KAFKA_TLS_CA")/ca.key" \
      -CAcreateserial -days 2 -sha256 -extfile "$(dirname "$KAFKA_TLS_CA")/broker.ext" \
      -out "$which.pem" 2>/dev/null
  ) || die "could not make the listener certificates"
done

MARK="# --- the part a reload changes ---"
# reloaded_part N: the tables the reloads change, the N-th variant (certificate a or b, a super
# user and a connection limit that differ each time).
reloaded_part() {
  local n=$1 which=a
  ((n % 2)) && which=b
  cat <<TOML
$MARK
[listener.tls]
cert_file = "$TLS/$which.pem"
key_file = "$TLS/$which.key"
client_auth = "none"

[authorizer]
plugin = "acl"
super_users = ["User:$KAFKA_ADMIN_USER", "User:$KAFKA_SASL_USER", "User:bench-extra-$n"]

[limits]
max_connections = $((10000 + n))
TOML
}
bench_start_portcullis "$RUN_DIR/portcullis" "$portcullis_bin" "$(reloaded_part 0)"
PORTCULLIS_PID=$BENCH_PORTCULLIS_PID
CONFIG=$RUN_DIR/portcullis/portcullis.toml
LOG=$RUN_DIR/portcullis/portcullis.log
BASE_CONFIG=$RUN_DIR/base.toml
sed "/^$MARK\$/,\$d" "$CONFIG" >"$BASE_CONFIG"
grep -q "^\[listener.tls\]" "$BASE_CONFIG" && die "the base configuration should not have the reloaded part"

# write_config N: the configuration with the N-th variant, replaced in one rename.
write_config() {
  { cat "$BASE_CONFIG"; reloaded_part "$1"; } >"$CONFIG.tmp"
  mv "$CONFIG.tmp" "$CONFIG"
}

CLIENT_CONFIG=$RUN_DIR/client.properties
cat >"$CLIENT_CONFIG" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$KAFKA_SASL_USER" password="$KAFKA_SASL_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$KAFKA_TLS_CA
ssl.endpoint.identification.algorithm=
PROPS
PLAIN_CONFIG=$RUN_DIR/plaintext.properties
echo "security.protocol=PLAINTEXT" >"$PLAIN_CONFIG"
cat >"$RUN_DIR/tools-log4j2.properties" <<'PROPS'
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
PROPS
JAVA_TOOL=(java -Xms256m -Xmx512m -XX:+UseG1GC "-Dlog4j2.configurationFile=$RUN_DIR/tools-log4j2.properties")
tool() { "${JAVA_TOOL[@]}" -cp "$TOOL_CLASSES:$KAFKA_LIB/*" DatapathTool "$@"; }
TOPIC=reload-bench
tool topic-create "$KAFKA_BOOTSTRAP" "$PLAIN_CONFIG" "$TOPIC" 1 >/dev/null

{
  echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "checkout:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "binary:    $portcullis_bin"
  echo "nproc:     $(nproc); loadavg $(loadavg) before the first run"
  echo "kafka:     $KAFKA_VERSION (KRaft, single node)"
  echo "workload:  $rate records/s × $record_size B, acks=1, ${seconds}s measured (+${warmup}s warm-up) per run, SASL_SSL + SCRAM-SHA-512 + acl"
  echo "reloads:   every ${interval}s in reload runs: SIGHUP after rewriting super_users, limits.max_connections and the listener certificate (a ↔ b)"
  echo "rounds:    $rounds (quiet and reload interleaved, the order swapped each round)"
  echo "command:   scripts/bench-reload.sh ${args[*]}"
} | tee "$RUN_DIR/machine.txt" >&2

# ---------------------------------------------------------------------------------------------
# 3. Runs

mkdir -p "$RUN_DIR/results" "$RUN_DIR/logs"
variant=0
# reloader: rewrites the file and sends SIGHUP every $interval s until killed.
reloader() {
  local n=$variant
  while :; do
    n=$((n + 1))
    write_config "$n"
    kill -HUP "$PORTCULLIS_PID"
    sleep "$interval"
  done
}
count() { grep -c "$1" "$LOG" || true; }

run() { # MODE ROUND
  local mode=$1 round=$2 name=$1-r$2 rc=0 applied0 refused0
  applied0=$(count "reload applied")
  refused0=$(count "reload refused")
  log "=== round $round: $mode"
  if [[ $mode == reload ]]; then
    reloader &
    RELOADER_PID=$!
  fi
  tool latency "127.0.0.1:${BENCH_PORTCULLIS_BOOTSTRAP##*:}" "$CLIENT_CONFIG" "$TOPIC" "$rate" "$seconds" \
    "$warmup" "$record_size" 1 >"$RUN_DIR/logs/$name.out" 2>"$RUN_DIR/logs/$name.err" || rc=$?
  if [[ -n $RELOADER_PID ]]; then
    kill "$RELOADER_PID" 2>/dev/null || true
    wait "$RELOADER_PID" 2>/dev/null || true
    RELOADER_PID=
    # The file is left at a variant the node applied (or applies now); the next run goes on from it.
    variant=$((variant + 1000))
    sleep 1
  fi
  local applied=$(($(count "reload applied") - applied0)) refused=$(($(count "reload refused") - refused0))
  python3 - "$RUN_DIR/logs/$name.out" "$mode" "$round" "$rc" "$applied" "$refused" \
    >"$RUN_DIR/results/$name.json" <<'PY'
import json, sys
out, mode, rnd, rc, applied, refused = sys.argv[1:]
lines = [l for l in open(out) if l.startswith("{")]
result = json.loads(lines[-1]) if lines else {"ok": False, "error": "no output"}
result.update(mode=mode, round=int(rnd), rc=int(rc), reloads_applied=int(applied), reloads_refused=int(refused))
print(json.dumps(result))
PY
  ((rc == 0)) || log "warning: $name: the tool failed (rc $rc, see $RUN_DIR/logs/$name.err)"
}

for ((round = 1; round <= rounds; round++)); do
  if ((round % 2)); then order=(quiet reload); else order=(reload quiet); fi
  for mode in "${order[@]}"; do run "$mode" "$round"; done
done
kill -0 "$PORTCULLIS_PID" 2>/dev/null || die "Portcullis died during the runs"

# ---------------------------------------------------------------------------------------------
# 4. Report

status=0
python3 - "$RUN_DIR" "$seconds" "$interval" >"$RUN_DIR/results.md" <<'PY' || status=$?
import json, pathlib, statistics, sys
run_dir, seconds, interval = pathlib.Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
runs = sorted((json.loads(p.read_text()) for p in (run_dir / "results").glob("*.json")),
              key=lambda r: (r["round"], r["mode"]))
ms = lambda us: us / 1000.0
print((run_dir / "machine.txt").read_text())
print("| round | mode | reloads applied / refused | sent | send errors | p50 ms | p99 ms | max ms |")
print("|---|---|---|---|---|---|---|---|")
bad = []
for r in runs:
    a = r.get("ack_us", {})
    print(f"| {r['round']} | {r['mode']} | {r['reloads_applied']} / {r['reloads_refused']} | {r.get('sent', 0)} | "
          f"{r.get('send_errors', '?')} | {ms(a.get('p50', 0)):.2f} | {ms(a.get('p99', 0)):.2f} | {ms(a.get('max', 0)):.2f} |")
    if not r.get("ok") or r["rc"] != 0:
        bad.append(f"{r['mode']} r{r['round']}: the producer failed ({r.get('error', 'see its log')})")
    if r["mode"] == "reload" and (r["reloads_refused"] or r["reloads_applied"] < max(1, int(seconds / interval / 2))):
        bad.append(f"reload r{r['round']}: {r['reloads_applied']} applied, {r['reloads_refused']} refused")
    if r["mode"] == "quiet" and r["reloads_applied"] + r["reloads_refused"]:
        bad.append(f"quiet r{r['round']}: a reload happened")
med = {}
for mode in ("quiet", "reload"):
    sel = [r["ack_us"] for r in runs if r["mode"] == mode and "ack_us" in r]
    med[mode] = {k: ms(statistics.median(a[k] for a in sel)) for k in ("p50", "p99", "max")} if sel else None
print()
print("| median over rounds | p50 ms | p99 ms | max ms |")
print("|---|---|---|---|")
for mode in ("quiet", "reload"):
    m = med[mode]
    if m:
        print(f"| {mode} | {m['p50']:.2f} | {m['p99']:.2f} | {m['max']:.2f} |")
if med["quiet"] and med["reload"]:
    d = med["reload"]["p99"] - med["quiet"]["p99"]
    pairs = [(r, q) for r in runs for q in runs if r["mode"] == "reload" and q["mode"] == "quiet" and r["round"] == q["round"]]
    worst = max(ms(r["ack_us"]["p99"] - q["ack_us"]["p99"]) for r, q in pairs)
    verdict = "within" if d <= 2.0 else "MISSED:"
    print()
    print(f"p99 with reloads − without: {d:+.2f} ms (median of rounds; worst round {worst:+.2f} ms): "
          f"{verdict} the 2 ms target")
for b in bad:
    print(f"ERROR: {b}")
sys.exit(1 if bad else 0)
PY
cat "$RUN_DIR/results.md"
mkdir -p "$TARGET_DIR/bench"
saved=$TARGET_DIR/bench/reload-$(date -u +%Y%m%dT%H%M%SZ).md
cp "$RUN_DIR/results.md" "$saved"
log "results saved to $saved"
exit "$status"
