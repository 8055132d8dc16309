#!/usr/bin/env bash
# Portcullis' login benchmark: the same full-login load against Apache Kafka's own SASL_PLAINTEXT
# listener and against Portcullis (in front of that Kafka), in one run, side by side.
#
#   1. builds the release binaries (`portcullis`, and `portcullis-login-load` from tools/login-load)
#      and runs the criterion SCRAM exchange bench (`cargo bench -p portcullis-plugin-scram`);
#   2. starts one Kafka 4.4 (KRaft, loopback, free ports; SCRAM-SHA-512/256 and PLAIN user) with
#      scripts/lib/kafka.sh, and one Portcullis (`portcullis scram add` the same user, then
#      `portcullis serve` with a generated config, upstream = Kafka's PLAINTEXT listener);
#   3. for every mechanism and round, runs portcullis-login-load against Kafka, then against
#      Portcullis, with the same connections, warm-up and duration, and records the servers' CPU;
#   4. prints a side-by-side table (also written as results.md in the run directory) and stops
#      everything it started.
#
# Usage: scripts/bench.sh [options]
#   --datapath           run the data-path benchmark instead (produce/consume/latency through
#                        Portcullis vs Kafka): scripts/bench-datapath.sh; the other arguments go
#                        to it (scripts/bench.sh --datapath --help)
#   --connections N      concurrent login workers (default 4)
#   --duration S         measured seconds per target and mechanism (default 20)
#   --warmup S           unmeasured seconds before each measurement (default 15)
#   --mechanisms LIST    space- or comma-separated (default "SCRAM-SHA-512 PLAIN")
#   --rounds N           repeat Kafka/Portcullis pairs N times per mechanism (default 2; the
#                        first round of a cold JVM is slower, see docs/benchmarks.md)
#   --threads N          tokio worker threads of the load tool (default 1)
#   --skip-criterion     do not run the criterion bench
#   --kafka-only         do not start Portcullis (measures Kafka alone)
#   --keep               keep the run directory (configs, logs, JSON) even on success
# Environment: PORTCULLIS_CACHE (default ~/.cache/portcullis), CARGO_TARGET_DIR.

set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --datapath ]]; then
  shift
  exec scripts/bench-datapath.sh "$@"
fi
# shellcheck source=lib/common.sh
source scripts/lib/common.sh
# shellcheck source=lib/kafka-deps.sh
source scripts/lib/kafka-deps.sh
# shellcheck source=lib/kafka.sh
source scripts/lib/kafka.sh
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh

connections=4
duration=20
warmup=15
mechanisms="SCRAM-SHA-512 PLAIN"
rounds=2
threads=1
criterion=1
with_portcullis=1
keep=0
while (($#)); do
  case "$1" in
    --connections) connections=${2:?}; shift ;;
    --duration) duration=${2:?}; shift ;;
    --warmup) warmup=${2:?}; shift ;;
    --mechanisms) mechanisms=${2:?}; shift ;;
    --rounds) rounds=${2:?}; shift ;;
    --threads) threads=${2:?}; shift ;;
    --skip-criterion) criterion=0 ;;
    --kafka-only) with_portcullis=0 ;;
    --keep) keep=1 ;;
    -h | --help) sed -n '2,/^# Environment/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
mechanisms=${mechanisms//,/ }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-bench.XXXXXX")
TARGET_DIR=$(cargo_target_dir)
PORTCULLIS_BIN=$TARGET_DIR/release/portcullis
LOAD_BIN=$TARGET_DIR/release/portcullis-login-load
PORTCULLIS_PID=
KAFKA_JAVA_PID=

cleanup() {
  local rc=$?
  if [[ -n $PORTCULLIS_PID ]]; then
    stop_pid "$PORTCULLIS_PID" 15
    PORTCULLIS_PID=
  fi
  kafka_stop
  # kafka.sh starts the JVM from a backgrounded shell function, so KAFKA_PID is that subshell;
  # stopping it alone leaves the JVM running. Stop the JVM we recorded too.
  if [[ -n $KAFKA_JAVA_PID ]]; then
    stop_pid "$KAFKA_JAVA_PID" 30
    KAFKA_JAVA_PID=
  fi
  if ((rc != 0)); then
    kafka_dump_log 60
    [[ -f $RUN_DIR/portcullis/portcullis.log ]] && tail -n 60 "$RUN_DIR/portcullis/portcullis.log" >&2
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

machine_info() {
  {
    echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "nproc:   $(nproc)"
    echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "kernel:  $(uname -r)"
    echo "rustc:   $(rustc --version)"
    echo "java:    $(java -version 2>&1 | head -n1)"
    echo "kafka:   $KAFKA_VERSION (KRaft, single node, num.network.threads=2, num.io.threads=4, heap ${KAFKA_HEAP_OPTS})"
    echo "loadavg: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, before the load runs)"
    echo "load:    $connections connections, ${warmup}s warm-up + ${duration}s measured per target, tool threads $threads, rounds $rounds"
  } | tee "$RUN_DIR/machine.txt"
}

# ---------------------------------------------------------------------------------------------
# 1. Build and the criterion bench

log "=== building release binaries"
cargo build --release -p portcullis-host -p portcullis-login-load --bins
[[ -x $LOAD_BIN ]] || die "no load tool at $LOAD_BIN"

if ((criterion)); then
  log "=== criterion: SCRAM server exchange"
  cargo bench -p portcullis-plugin-scram --bench scram_exchange -- --noplot 2>&1 |
    tee "$RUN_DIR/criterion.txt" >&2
fi

# ---------------------------------------------------------------------------------------------
# 2. Kafka and Portcullis

ensure_kafka_deps
kafka_start "$RUN_DIR/kafka"
KAFKA_JAVA_PID=$(kafka_java_pid "$KAFKA_PID") || die "cannot find Kafka's JVM under pid $KAFKA_PID"

start_portcullis() {
  local dir=$RUN_DIR/portcullis ports listen_port broker_port
  mkdir -p "$dir"
  mapfile -t ports < <(free_ports 2)
  listen_port=${ports[0]}
  # Kafka's node id is 1, served at broker_port_base + 1.
  broker_port=${ports[1]}
  cat >"$dir/portcullis.toml" <<TOML
[node]
id = 1
data_dir = "$dir/data"

[listener]
address = "127.0.0.1:$listen_port"
advertised_host = "127.0.0.1"
broker_port_base = $((broker_port - 1))
sasl_mechanisms = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]

[upstream]
bootstrap_servers = ["$KAFKA_BOOTSTRAP"]
security_protocol = "PLAINTEXT"

[forwarding]
policy = "passthrough"
TOML
  # The same user and password as Kafka's SASL listener; PLAIN is checked against the SCRAM
  # credential in Portcullis, so these two calls provision all three mechanisms.
  local mech
  for mech in SCRAM-SHA-512 SCRAM-SHA-256; do
    printf '%s\n' "$KAFKA_SASL_PASSWORD" |
      "$PORTCULLIS_BIN" scram add --config "$dir/portcullis.toml" --user "$KAFKA_SASL_USER" \
        --mechanism "$mech" --password-stdin >>"$dir/scram-add.log" 2>&1 ||
      { cat "$dir/scram-add.log" >&2; die "portcullis scram add $mech failed"; }
  done
  log "starting Portcullis on 127.0.0.1:$listen_port (broker 1 at 127.0.0.1:$broker_port)"
  # The default level, set explicitly so a RUST_LOG=debug in the caller's shell cannot turn on
  # per-request logging and skew the result (Kafka logs nothing per successful login at INFO).
  (cd "$dir" && RUST_LOG=info exec "$PORTCULLIS_BIN" serve --config "$dir/portcullis.toml") \
    >"$dir/portcullis.log" 2>&1 &
  PORTCULLIS_PID=$!
  wait_for_port 127.0.0.1 "$listen_port" 30 "$PORTCULLIS_PID" &&
    wait_for_port 127.0.0.1 "$broker_port" 30 "$PORTCULLIS_PID" ||
    die "Portcullis did not open its ports (log: $dir/portcullis.log)"
  PORTCULLIS_BOOTSTRAP=127.0.0.1:$listen_port
}

targets=(kafka)
if ((with_portcullis)); then
  start_portcullis
  targets+=(portcullis)
fi

# ---------------------------------------------------------------------------------------------
# 3. Load

# run_load TARGET MECHANISM ROUND: one measurement, written to $RUN_DIR/results/TARGET-MECH-ROUND.json,
# with the CPU seconds Kafka's JVM and Portcullis spent over the whole run (warm-up included): the
# target's own cost, and a check that the other side stayed idle (Portcullis opens an upstream
# connection only for a forwarded request, so a login alone never reaches Kafka).
run_load() {
  local target=$1 mech=$2 round=$3 bootstrap rc=0
  local k_before k_after p_before=0 p_after=0
  case $target in
    kafka) bootstrap=$KAFKA_SASL_BOOTSTRAP ;;
    portcullis) bootstrap=$PORTCULLIS_BOOTSTRAP ;;
  esac
  local out=$RUN_DIR/results/$target-$mech-$round.json
  log "=== $mech round $round: $target at $bootstrap"
  k_before=$(cpu_ticks "$KAFKA_JAVA_PID")
  [[ -n $PORTCULLIS_PID ]] && p_before=$(cpu_ticks "$PORTCULLIS_PID")
  LOAD_PASSWORD=$KAFKA_SASL_PASSWORD "$LOAD_BIN" --bootstrap "$bootstrap" --mechanism "$mech" \
    --user "$KAFKA_SASL_USER" --password-env LOAD_PASSWORD --connections "$connections" \
    --warmup "$warmup" --duration "$duration" --threads "$threads" --json >"$out.tmp" || rc=$?
  k_after=$(cpu_ticks "$KAFKA_JAVA_PID") || die "Kafka died during the $target $mech run"
  if [[ -n $PORTCULLIS_PID ]]; then
    p_after=$(cpu_ticks "$PORTCULLIS_PID") || die "Portcullis died during the $target $mech run"
  fi
  python3 - "$out.tmp" "$out" "$target" "$round" "$k_before" "$k_after" "$p_before" "$p_after" \
    "$(getconf CLK_TCK)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
src, dst, target, rnd, kb, ka, pb, pa, hz, load = sys.argv[1:]
r = json.load(open(src))
r["target"] = target
r["round"] = int(rnd)
r["kafka_cpu_s"] = (int(ka) - int(kb)) / int(hz)
r["portcullis_cpu_s"] = (int(pa) - int(pb)) / int(hz)
r["server_cpu_s"] = r[target + "_cpu_s"]
r["loadavg_after"] = load
json.dump(r, open(dst, "w"), indent=2)
PY
  rm -f "$out.tmp"
  ((rc == 0)) || log "warning: $target $mech had failures or no logins (exit $rc)"
}

mkdir -p "$RUN_DIR/results"
machine_info >&2
for mech in $mechanisms; do
  for ((round = 1; round <= rounds; round++)); do
    for target in "${targets[@]}"; do
      run_load "$target" "$mech" "$round"
    done
  done
done

# ---------------------------------------------------------------------------------------------
# 4. Report

python3 - "$RUN_DIR" <<'PY' | tee "$RUN_DIR/results.md"
import glob, json, os, re, sys

run = sys.argv[1]
rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(run, "results", "*.json")))]
order = {"kafka": 0, "portcullis": 1}
rows.sort(key=lambda r: (r["mechanism"], r["round"], order.get(r["target"], 9)))

print("## Machine\n")
print("```")
print(open(os.path.join(run, "machine.txt")).read().rstrip())
print("```\n")

crit = os.path.join(run, "criterion.txt")
if os.path.exists(crit):
    print("## Criterion: one SCRAM server exchange (client-first → server-final, both sides)\n")
    print("| bench | low | estimate | high |")
    print("|---|---|---|---|")
    # Criterion prints the name, then `time: [low estimate high]` on the same or the next line.
    name = None
    for line in open(crit):
        if "server exchange" in line and not line.lstrip().startswith(("Benchmarking", "Found", "Warning")):
            name = line.split("time:")[0].strip()
        m = re.search(r"time:\s*\[(.*)\]", line)
        if m and name:
            t = m.group(1).split()
            print(f"| {name} | {t[0]} {t[1]} | {t[2]} {t[3]} | {t[4]} {t[5]} |")
            name = None
    print()

print("## Full logins, side by side\n")
print("| mechanism | round | target | logins/s | p50 ms | p90 ms | p99 ms | max ms | failures | target CPU ms/login | Kafka CPU s | Portcullis CPU s | client CPU s | load avg after |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    lat = r.get("latency") or {}
    total = r["logins"] + r["warmup_logins"]
    per = (1000 * r["server_cpu_s"] / total) if total else float("nan")
    cpu = r.get("client_cpu_s")
    print(f"| {r['mechanism']} | {r['round']} | {r['target']} | {r['logins_per_s']:.0f} | "
          f"{lat.get('p50_ms', float('nan')):.2f} | {lat.get('p90_ms', float('nan')):.2f} | "
          f"{lat.get('p99_ms', float('nan')):.2f} | {lat.get('max_ms', float('nan')):.2f} | "
          f"{r['failures_total']} | {per:.3f} | {r['kafka_cpu_s']:.2f} | {r['portcullis_cpu_s']:.2f} | "
          f"{'n/a' if cpu is None else f'{cpu:.2f}'} | {r['loadavg_after']} |")
print()
fails = [(r, k, v) for r in rows for k, v in r["failures"].items()]
if fails:
    print("Failures:\n")
    for r, k, v in fails:
        print(f"- {r['target']} {r['mechanism']} round {r['round']}: {v} × {k}")
    print()

pairs = {}
for r in rows:
    pairs.setdefault((r["mechanism"], r["round"]), {})[r["target"]] = r
ratios = []
for (mech, rnd), p in sorted(pairs.items()):
    if "kafka" in p and "portcullis" in p and p["kafka"]["logins_per_s"] > 0:
        k, q = p["kafka"], p["portcullis"]
        ratios.append(f"- {mech} round {rnd}: Portcullis/Kafka logins/s = "
                      f"{q['logins_per_s'] / k['logins_per_s']:.2f}; p50 "
                      f"{(q.get('latency') or {}).get('p50_ms', float('nan')):.2f} ms vs "
                      f"{(k.get('latency') or {}).get('p50_ms', float('nan')):.2f} ms")
if ratios:
    print("Ratios (same run, same load):\n")
    print("\n".join(ratios))
    print()
print("CPU seconds cover the whole run of that row (warm-up included); \"target CPU ms/login\" divides the "
      "target's CPU by all its logins (warm-up included). Kafka's figure is the whole JVM (GC, KRaft and "
      "other background threads too). The client, Kafka and Portcullis share the same cores.")
PY

mkdir -p "$TARGET_DIR/bench"
saved=$TARGET_DIR/bench/results-$(date -u +%Y%m%dT%H%M%SZ).md
cp "$RUN_DIR/results.md" "$saved"
log "results saved to $saved"
failed_runs=$(python3 - "$RUN_DIR" <<'PY'
import glob, json, sys
rows = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/results/*.json")]
print(sum(1 for r in rows if r["failures_total"] or not r["logins"]))
PY
)
((failed_runs == 0)) || die "$failed_runs measurement(s) had failures or no logins (see above)"
