#!/usr/bin/env bash
# Portcullis' data-path benchmark: Kafka's own ProducerPerformance, ConsumerPerformance and
# EndToEndLatency (org.apache.kafka.tools.*, Kafka 4.4 jars), straight against Kafka's SASL
# listener and through Portcullis (without and with the `acl` authorizer), in interleaved rounds,
# in one run, on one machine. Also `scripts/bench.sh --datapath`.
#
#   1. builds the release `portcullis` (or takes --portcullis-bin) and compiles
#      benches/datapath/DatapathTool.java (topics, ACLs, the open-loop latency probe);
#   2. starts one Kafka 4.4 (scripts/lib/kafka.sh), the bare relays of --relay-floor, and one
#      Portcullis per authorizer setting, in front of Kafka's PLAINTEXT listener; the `acl` node
#      gets prefixed ACLs for the client user through its own CreateAcls (the user is a super
#      user on Kafka, as Portcullis' upstream is);
#   3. fills one topic for the consume case per --connections value (straight to Kafka), then for
#      every round, every case and every target (the target order rotates each round) runs the
#      case and reads the CPU time of the Kafka JVM and of the Portcullis (or relay) under test from
#      /proc/PID/stat, their context switches (summed over /proc/PID/task/*/status), the CPU time
#      of the client tool (this shell's waited-for children), and how busy the whole machine was
#      (/proc/stat);
#   4. prints per case the ratio Portcullis ÷ Kafka (min / median / max over rounds), the added
#      latency, the CPU seconds and the wake-ups per GiB moved of each server, the client's CPU
#      seconds per GiB, and the share of the machine's CPU in use; exits 1 if any run had an error.
#
# Wake-ups: a thread's voluntary context switches (voluntary_ctxt_switches) count the times it
# blocked (epoll_wait, a futex, a read with nothing to read) and so needed a wake-up to go on;
# the report gives them per GiB moved, summed over every thread of the server process.
# Involuntary switches (preemptions) are kept too. A thread that exits during a run takes its
# counts with it (the kernel keeps them only for getrusage), so the sum misses short-lived
# threads; the threads that move data (tokio's workers, Kafka's network and I/O threads) live as
# long as the process.
#
# Cases (--cases, comma-separated; default all):
#   consume   ConsumerPerformance, fresh group, reads --records records (fetch phase: fetch.MB.sec)
#   produce   ProducerPerformance, --records records, for each --batch-sizes × --acks, into a fresh
#             topic deleted afterwards
#   Both run once per --connections value N; N > 1 runs DatapathTool consume-many / produce-many
#   instead (N consumers in one group / N producers, each with its own connections, measured as
#   Kafka's tools measure one; cases consume-c<N>, produce-b<batch>-acks<acks>-c<N>) on topics of
#   max(--partitions, N) partitions, so that every consumer gets a partition.
#   latency   DatapathTool latency: open loop, --latency-rate records/s for --latency-seconds
#             (after --latency-warmup s), producer acks=--latency-acks, end-to-end p50/p99 in µs
#   e2e       EndToEndLatency (closed loop, --e2e-records records, acks=1): its average in ms
#   latency-load  (not in the default) the latency probe while the same target carries a load of
#             --load-fraction of direct Kafka's produce throughput: a ProducerPerformance
#             (batch.size 16384, acks=1) throttled to that many records/s into a fresh topic, and a
#             ConsumerPerformance reading them as they come. The rate is the same round's direct
#             produce run's (batch.size 16384, acks=1, one client) when the run has that case, else
#             one calibration run of that producer straight to Kafka's SASL listener before the
#             rounds; the report gives the load each run asked and carried beside the added latency
#
# Usage: scripts/bench-datapath.sh [options]
#   --records N           records per produce / consume run (default 300000; the issue's
#                         reference run is 2000000)
#   --record-size B       bytes per record (default 1024)
#   --rounds N            interleaved rounds (default 3)
#   --batch-sizes LIST    producer batch.size values (default 16384,262144)
#   --acks LIST           producer acks values (default 1,all)
#   --partitions N        partitions of the produce and consume topics (default 1)
#   --connections LIST    clients of the consume and produce cases, each with its own
#                         connections (default 1); e.g. 1,50 measures both in the same rounds
#   --latency-rate R      records/s of the latency probe (default 1000)
#   --latency-seconds S   measured seconds of the latency probe (default 15)
#   --latency-warmup S    unmeasured seconds before them (default 5)
#   --latency-acks A      producer acks of the latency probe (default 1)
#   --e2e-records N       EndToEndLatency records (default 2000)
#   --load-fraction F     latency-load: the load as a share of direct throughput (default 0.5)
#   --cases LIST          consume,produce,latency,e2e,latency-load (default all but latency-load)
#   --authorizer WHICH    none | acl | both (default both): which Portcullis nodes to measure
#   --portcullis-bin P    use this binary instead of building one (e.g. a saved baseline)
#   --baseline-bin P      also measure this second binary (targets `base-portcullis`,
#                         `base-portcullis-acl`) in the same rounds: an A/B of two builds
#   --relay-floor MODES   also measure bare byte relays (targets `relay-<mode>`; MODES from
#                         tokio-mt, tokio-ct, uring, splice, one-task, comma-separated, each once):
#                         benches/relay-io's relay in front of a SASL listener of Kafka's own that
#                         advertises the relay's address. It parses and authenticates nothing and
#                         moves bytes both ways: what a process in the path costs before it does
#                         any of Portcullis' work, a reference point beside Portcullis' figures
#                         (not a bound: Portcullis splices large responses, `tokio-mt` copies
#                         them). Its CPU and wake-ups are in the report's Portcullis columns, and
#                         --profile attaches to it as to a Portcullis node
#   --telemetry           also measure, for each Portcullis node of this build, a twin `otel-…`
#                         that exports every span (trace_sample_ratio = 1.0) and its metrics over
#                         OTLP/HTTP to a Jaeger all-in-one on loopback (scripts/lib/jaeger.sh,
#                         built once) and serves /metrics; the report adds exporting ÷ disabled
#   --profile TOOL        perf | stat | strace | syscalls | trace | sched: profile the Portcullis
#                         under test during its runs (perf record with DWARF call graphs, which
#                         a release build without frame pointers needs / perf stat of CPU,
#                         context switches and migrations / strace -c -f / perf stat counts of
#                         the data path's system calls at their tracepoints, exact counts, and
#                         PROFILE_EXTRA_EVENTS (e.g. uprobes) beside them / perf trace of those
#                         calls with their times, and scripts/lib/syscall_gaps.py's report of
#                         how long each read's bytes stay in the process before they are
#                         written on /
#                         perf sched record of the whole machine, for `perf sched timehist`:
#                         how long each thread waited for a CPU once woken); results in the run
#                         directory's profiles/, and the counts and gaps at the end of the
#                         report; every profiler slows the machine down, so the ratios and CPU
#                         of such a run are not figures. perf record with DWARF stacks writes
#                         about 8 MB/s per busy CPU; PERF_EVENT_MODIFIER=:u samples user time
#                         only
#   --keep                keep the run directory (configs, logs, JSON) even on success
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
# shellcheck source=lib/jaeger_config.sh
source scripts/lib/jaeger_config.sh

records=300000
record_size=1024
rounds=3
batch_sizes=16384,262144
acks_list=1,all
partitions=1
connections=1
latency_rate=1000
latency_seconds=15
latency_warmup=5
latency_acks=1
e2e_records=2000
load_fraction=0.5
cases=consume,produce,latency,e2e
authorizer=both
portcullis_bin=
baseline_bin=
relay_modes=
telemetry=0
profile=
keep=0
args=("$@")
while (($#)); do
  case "$1" in
    --records) records=${2:?}; shift ;;
    --record-size) record_size=${2:?}; shift ;;
    --rounds) rounds=${2:?}; shift ;;
    --batch-sizes) batch_sizes=${2:?}; shift ;;
    --acks) acks_list=${2:?}; shift ;;
    --partitions) partitions=${2:?}; shift ;;
    --connections) connections=${2:?}; shift ;;
    --latency-rate) latency_rate=${2:?}; shift ;;
    --latency-seconds) latency_seconds=${2:?}; shift ;;
    --latency-warmup) latency_warmup=${2:?}; shift ;;
    --latency-acks) latency_acks=${2:?}; shift ;;
    --e2e-records) e2e_records=${2:?}; shift ;;
    --load-fraction) load_fraction=${2:?}; shift ;;
    --cases) cases=${2:?}; shift ;;
    --authorizer) authorizer=${2:?}; shift ;;
    --portcullis-bin) portcullis_bin=${2:?}; shift ;;
    --baseline-bin) baseline_bin=${2:?}; shift ;;
    --relay-floor) relay_modes=${2:?}; shift ;;
    --telemetry) telemetry=1 ;;
    --profile) profile=${2:?}; shift ;;
    --keep) keep=1 ;;
    -h | --help) sed -n '2,/^# Environment/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
for n in records record_size rounds partitions latency_rate latency_seconds e2e_records; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "--${n//_/-} must be a positive integer"
done
[[ $latency_warmup =~ ^[0-9]+$ ]] || die "--latency-warmup must be a non-negative integer"
[[ $load_fraction =~ ^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]] || die "--load-fraction must be a number in (0, 1]"
IFS=, read -r -a conn_list <<<"$connections"
((${#conn_list[@]})) || die "--connections must list at least one number"
for n in "${conn_list[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "--connections must be a comma-separated list of positive integers"
done
case $authorizer in none | acl | both) ;; *) die "--authorizer must be none, acl or both" ;; esac
case $profile in '' | perf | stat | strace | syscalls | trace | sched) ;; *) die "--profile must be perf, stat, strace, syscalls, trace or sched" ;; esac
IFS=, read -r -a relay_list <<<"$relay_modes"
declare -A relay_seen=()
for mode in "${relay_list[@]}"; do
  case $mode in
    tokio-mt | tokio-ct | uring | splice | one-task) ;;
    *) die "--relay-floor: unknown mode $mode (tokio-mt, tokio-ct, uring, splice, one-task)" ;;
  esac
  [[ -z ${relay_seen[$mode]:-} ]] || die "--relay-floor: $mode is named twice"
  relay_seen[$mode]=1
done
want_case() { [[ ",$cases," == *",$1,"* ]]; }

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-datapath.XXXXXX")
TARGET_DIR=$(cargo_target_dir)
declare -A PORTCULLIS_PIDS=() BOOTSTRAPS=()
KAFKA_JAVA_PID=
PROFILER_PID=
JAEGER_PID=
LOAD_PIDS=()

cleanup() {
  local rc=$?
  # A profiler exits with the signal it was stopped with: that must not end the cleanup here.
  if [[ -n $PROFILER_PID ]]; then
    { kill -INT "$PROFILER_PID" && wait "$PROFILER_PID"; } 2>/dev/null || true
  fi
  local pid
  # A background function is a subshell: its JVM may be a child of it.
  for pid in "${LOAD_PIDS[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; stop_pid "$pid" 5; done
  local name
  for name in "${!PORTCULLIS_PIDS[@]}"; do
    stop_pid "${PORTCULLIS_PIDS[$name]}" 15
  done
  [[ -n $JAEGER_PID ]] && stop_pid "$JAEGER_PID" 15
  kafka_stop
  if [[ -n $KAFKA_JAVA_PID ]]; then
    stop_pid "$KAFKA_JAVA_PID" 30
  fi
  if ((rc != 0)); then
    kafka_dump_log 40
    for name in "${!PORTCULLIS_PIDS[@]}"; do
      for f in "$RUN_DIR/$name/portcullis.log" "$RUN_DIR/$name/relay.log"; do
        [[ -f $f ]] && tail -n 40 "$f" >&2
      done
    done
    log "run directory kept: $RUN_DIR"
  elif ((keep)) || [[ -n $profile ]]; then
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
portcullis_bin=$(cd "$(dirname "$portcullis_bin")" && pwd)/$(basename "$portcullis_bin")
if [[ -n $baseline_bin ]]; then
  [[ -x $baseline_bin ]] || die "no portcullis binary at $baseline_bin"
  baseline_bin=$(cd "$(dirname "$baseline_bin")" && pwd)/$(basename "$baseline_bin")
fi
if ((${#relay_list[@]})); then
  log "=== building the bare relay (benches/relay-io)"
  cargo build --release -p portcullis-bench-relay-io --bin relay-io
  relay_bin=$TARGET_DIR/release/relay-io
fi

require_tools java javac python3
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
if [[ $profile == perf || $profile == stat || $profile == syscalls || $profile == trace || $profile == sched ]]; then require_tools perf; fi
# The system calls that move a connection's bytes and park or wake its threads, counted at
# their tracepoints (cheap: counting, no record per call).
TRACED_SYSCALLS=raw_syscalls:sys_enter
for call in recvfrom recvmsg read readv writev sendto sendmsg write splice epoll_wait futex; do
  TRACED_SYSCALLS+=,syscalls:sys_enter_$call
done
# PROFILE_EXTRA_EVENTS (comma-separated, e.g. uprobes set up by hand) are counted beside them.
if [[ -n ${PROFILE_EXTRA_EVENTS:-} ]]; then TRACED_SYSCALLS+=,$PROFILE_EXTRA_EVENTS; fi
# The same calls, each recorded with its time (--profile trace; see scripts/lib/syscall_gaps.py).
TIMED_SYSCALLS=recvfrom,recvmsg,read,readv,writev,sendto,sendmsg,write,splice,epoll_wait,futex
if [[ $profile == strace ]]; then require_tools strace; fi

# ---------------------------------------------------------------------------------------------
# 2. Kafka, the bare relays (--relay-floor), client configs, Portcullis nodes

KAFKA_RELAYS=${#relay_list[@]} kafka_start "$RUN_DIR/kafka"
KAFKA_JAVA_PID=$(kafka_java_pid "$KAFKA_PID") || die "cannot find Kafka's JVM under pid $KAFKA_PID"
# The bare relays (--relay-floor), each in front of the Kafka listener that advertises its
# address. Started before anything else takes ports: kafka_start picked theirs, and only a bind
# holds a port. Each must print its own listening line (a connect could reach another server on a
# port taken in between), and Metadata through it must name it, so that a client that bootstraps
# through a relay stays on that relay.
read -r -a relayed_bootstraps <<<"${KAFKA_RELAYED_BOOTSTRAPS:-}"
read -r -a relay_addresses <<<"${KAFKA_RELAY_ADDRESSES:-}"
for i in "${!relay_list[@]}"; do
  name=relay-${relay_list[$i]}
  mkdir -p "$RUN_DIR/$name"
  "$relay_bin" relay --mode "${relay_list[$i]}" --listen "${relay_addresses[$i]}" \
    --upstream "${relayed_bootstraps[$i]}" >"$RUN_DIR/$name/relay.log" 2>&1 &
  PORTCULLIS_PIDS[$name]=$!
  deadline=$((SECONDS + 30))
  until grep -qx "listening ${relay_addresses[$i]}" "$RUN_DIR/$name/relay.log"; do
    kill -0 "${PORTCULLIS_PIDS[$name]}" 2>/dev/null && ((SECONDS < deadline)) ||
      die "the $name relay did not listen on ${relay_addresses[$i]} (log: $RUN_DIR/$name/relay.log)"
    sleep 0.1
  done
  metadata=$(kcat -L -b "${relay_addresses[$i]}" -m 10 -X security.protocol=SASL_PLAINTEXT \
    -X sasl.mechanisms=PLAIN -X "sasl.username=$KAFKA_SASL_USER" -X "sasl.password=$KAFKA_SASL_PASSWORD" 2>&1) ||
    true
  [[ $metadata == *"broker 1 at ${relay_addresses[$i]}"* ]] ||
    die "Metadata through the $name relay does not name the relay (${relay_addresses[$i]}): $metadata"
  BOOTSTRAPS[$name]=${relay_addresses[$i]}
done

# The client tools log WARN and above to stderr (kept per run; ERROR lines fail the run).
cat >"$RUN_DIR/tools-log4j2.properties" <<'PROPS'
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
# INFO of the network client names a request that timed out (a stalled response), counted as an error.
logger.nc.name = org.apache.kafka.clients.NetworkClient
logger.nc.level = INFO
PROPS
sasl_config() { # FILE USER PASSWORD
  cat >"$1" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$2" password="$3";
PROPS
}
CLIENT_CONFIG=$RUN_DIR/client.properties
ADMIN_CONFIG=$RUN_DIR/admin.properties
PLAIN_CONFIG=$RUN_DIR/plaintext.properties
sasl_config "$CLIENT_CONFIG" "$KAFKA_SASL_USER" "$KAFKA_SASL_PASSWORD"
sasl_config "$ADMIN_CONFIG" "$KAFKA_ADMIN_USER" "$KAFKA_ADMIN_PASSWORD"
echo "security.protocol=PLAINTEXT" >"$PLAIN_CONFIG"

# An English locale: the tools' figures are parsed (a decimal comma would lose them).
JAVA_TOOL=(java -Xms256m -Xmx512m -XX:+UseG1GC -Duser.language=en -Duser.country=US
  "-Dlog4j2.configurationFile=$RUN_DIR/tools-log4j2.properties")
tool() { "${JAVA_TOOL[@]}" -cp "$TOOL_CLASSES:$KAFKA_LIB/*" DatapathTool "$@"; }
# The many-client cases: N clients in one JVM, each producer with the default 32 MiB buffer pool
# (DatapathTool.produceMany says why), so a larger heap; its GC log is kept next to the run's logs.
many_tool() {
  java -Xms512m -Xmx3g -XX:+UseG1GC "-Dlog4j2.configurationFile=$RUN_DIR/tools-log4j2.properties" \
    "-Xlog:gc:file=$RUN_DIR/logs/gc-$(date +%s%N).log" -cp "$TOOL_CLASSES:$KAFKA_LIB/*" DatapathTool "$@"
}
# Topics are managed straight on Kafka's PLAINTEXT listener (ANONYMOUS is a super user there).
topic_create() { tool topic-create "$KAFKA_BOOTSTRAP" "$PLAIN_CONFIG" "$1" "$2" >/dev/null; }
topic_delete() { tool topic-delete "$KAFKA_BOOTSTRAP" "$PLAIN_CONFIG" "$@" >/dev/null; }

targets=(kafka)
BOOTSTRAPS[kafka]=$KAFKA_SASL_BOOTSTRAP
# start_nodes PREFIX BINARY [EXTRA_TOML]: the Portcullis nodes of one build (without / with the
# authorizer), EXTRA_TOML appended to their configs.
start_nodes() {
  local prefix=$1 bin=$2 extra=${3:-}
  if [[ $authorizer == none || $authorizer == both ]]; then
    bench_start_portcullis "$RUN_DIR/${prefix}portcullis" "$bin" "$extra"
    PORTCULLIS_PIDS[${prefix}portcullis]=$BENCH_PORTCULLIS_PID
    BOOTSTRAPS[${prefix}portcullis]=$BENCH_PORTCULLIS_BOOTSTRAP
    targets+=("${prefix}portcullis")
  fi
  if [[ $authorizer == acl || $authorizer == both ]]; then
    bench_start_portcullis "$RUN_DIR/${prefix}portcullis-acl" "$bin" "$extra
[authorizer]
plugin = \"acl\"
super_users = [\"User:$KAFKA_ADMIN_USER\"]"
    PORTCULLIS_PIDS[${prefix}portcullis-acl]=$BENCH_PORTCULLIS_PID
    BOOTSTRAPS[${prefix}portcullis-acl]=$BENCH_PORTCULLIS_BOOTSTRAP
    targets+=("${prefix}portcullis-acl")
    # The client user gets what the cases need, through Portcullis' own ACL API: WRITE, READ
    # and DESCRIBE on topics `dp-*`, READ on groups `dp-*` and `test-group-*`
    # (EndToEndLatency's).
    tool acls "$BENCH_PORTCULLIS_BOOTSTRAP" "$ADMIN_CONFIG" "User:$KAFKA_SASL_USER" dp- dp- test-group- ||
      die "creating the benchmark ACLs through Portcullis failed"
  fi
}
start_nodes "" "$portcullis_bin"
[[ -n $baseline_bin ]] && start_nodes base- "$baseline_bin"
for mode in "${relay_list[@]}"; do targets+=("relay-$mode"); done
if ((telemetry)); then
  # Jaeger v2 with an OTLP/HTTP receiver and in-memory storage; its own telemetry off.
  jaeger_bin=$(scripts/lib/jaeger.sh)
  mapfile -t jports < <(free_ports 4)
  mkdir -p "$RUN_DIR/jaeger"
  jaeger_config "${jports[0]}" "${jports[1]}" "${jports[2]}" 10000 >"$RUN_DIR/jaeger/jaeger.yaml"
  OTEL_TRACES_EXPORTER=none "$jaeger_bin" --config "$RUN_DIR/jaeger/jaeger.yaml" \
    >"$RUN_DIR/jaeger/jaeger.log" 2>&1 &
  JAEGER_PID=$!
  wait_for_port 127.0.0.1 "${jports[2]}" 60 "$JAEGER_PID" ||
    die "Jaeger did not open its OTLP port (log: $RUN_DIR/jaeger/jaeger.log)"
  JAEGER_QUERY=http://127.0.0.1:${jports[0]}
  start_nodes otel- "$portcullis_bin" "
[telemetry]
service_name = \"portcullis-bench\"
otlp_endpoint = \"http://127.0.0.1:${jports[2]}\"
prometheus_address = \"127.0.0.1:${jports[3]}\"
trace_sample_ratio = 1.0"
fi

binary_origin() {
  local commit_file
  commit_file=$(dirname "$1")/COMMIT
  if [[ -f $commit_file ]]; then echo " (built from $(head -c 40 "$commit_file"))"; fi
}
machine_info() {
  echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "checkout:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
  # A binary passed in may come from elsewhere: a COMMIT file next to it says what it was built from.
  echo "binary:    $portcullis_bin$(binary_origin "$portcullis_bin")${baseline_bin:+ (targets portcullis*); baseline $baseline_bin$(binary_origin "$baseline_bin") (targets base-portcullis*)}"
  if ((${#relay_list[@]})); then
    echo "relays:    benches/relay-io relay --mode {$relay_modes} (targets relay-*): bare byte relays in front of Kafka listeners that advertise them; their CPU and wake-ups are in the Portcullis columns"
  fi
  echo "nproc:     $(nproc)"
  echo "cpu:       $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "kernel:    $(uname -r)"
  echo "java:      $(java -version 2>&1 | head -n1)"
  echo "kafka:     $KAFKA_VERSION (KRaft, single node, num.network.threads=2, num.io.threads=4, heap ${KAFKA_HEAP_OPTS})"
  echo "loadavg:   $(loadavg) (1/5/15 min, before the first run)"
  echo "workload:  $records × $record_size B per produce/consume run, $partitions partition(s), batch.size {$batch_sizes} × acks {$acks_list}, client connections {$connections} (N > 1: max(partitions, N) partitions); latency probe $latency_rate/s for ${latency_seconds}s (+${latency_warmup}s warm-up, acks=$latency_acks); EndToEndLatency $e2e_records records"
  echo "rounds:    $rounds (target order rotates each round); targets: ${targets[*]}"
  if ((telemetry)); then
    echo "telemetry: otel-* nodes export every span (ratio 1.0) and their metrics over OTLP/HTTP to $(basename "$(dirname "$(dirname "$jaeger_bin")")") on loopback; the others have no [telemetry]"
  fi
  echo "command:   scripts/bench-datapath.sh ${args[*]}"
}
mkdir -p "$RUN_DIR/results" "$RUN_DIR/logs" "$RUN_DIR/profiles"
machine_info | tee "$RUN_DIR/machine.txt" >&2

# ---------------------------------------------------------------------------------------------
# 3. Runs

# profile_start TARGET NAME / profile_stop: attach the profiler to the Portcullis under test.
profile_start() {
  local target=$1 name=$2 pid=${PORTCULLIS_PIDS[$1]:-}
  [[ -n $profile && -n $pid ]] || return 0
  case $profile in
    perf) perf record -e "cpu-clock${PERF_EVENT_MODIFIER:-}" -F 499 --call-graph dwarf,16384 -p "$pid" -o "$RUN_DIR/profiles/$name.perf.data" >"$RUN_DIR/profiles/$name.perf.log" 2>&1 & ;;
    stat) perf stat -e task-clock,context-switches,cpu-migrations,page-faults -p "$pid" \
      -o "$RUN_DIR/profiles/$name.stat.txt" >"$RUN_DIR/profiles/$name.stat.log" 2>&1 & ;;
    strace) strace -c -f -p "$pid" -o "$RUN_DIR/profiles/$name.strace.txt" 2>"$RUN_DIR/profiles/$name.strace.log" & ;;
    syscalls) perf stat -x, -e "$TRACED_SYSCALLS" -p "$pid" -o "$RUN_DIR/profiles/$name.syscalls.txt" \
      >"$RUN_DIR/profiles/$name.syscalls.log" 2>&1 & ;;
    trace) perf trace -p "$pid" -e "$TIMED_SYSCALLS" -o "$RUN_DIR/profiles/$name.trace.txt" \
      >"$RUN_DIR/profiles/$name.trace.log" 2>&1 & ;;
    sched) perf sched record -a -o "$RUN_DIR/profiles/$name.sched.data" \
      >"$RUN_DIR/profiles/$name.sched.log" 2>&1 & ;;
  esac
  PROFILER_PID=$!
  sleep 1
  kill -0 "$PROFILER_PID" 2>/dev/null ||
    die "the $profile profiler did not start: see $RUN_DIR/profiles/$name.*.log"
}
profile_stop() {
  [[ -n $PROFILER_PID ]] || return 0
  kill -INT "$PROFILER_PID" 2>/dev/null || true
  wait "$PROFILER_PID" 2>/dev/null || true
  PROFILER_PID=
}

# ctxt_switches PID: "VOLUNTARY INVOLUNTARY" context switches summed over the threads of PID.
# Threads come and go: grep skips a task that vanished between the glob and its read.
ctxt_switches() {
  local key value vol=0 invol=0
  while read -r key value; do
    case $key in
      voluntary_ctxt_switches:) vol=$((vol + value)) ;;
      nonvoluntary_ctxt_switches:) invol=$((invol + value)) ;;
    esac
  done < <(grep -h -E '^(non)?voluntary_ctxt_switches:' /proc/"$1"/task/*/status 2>/dev/null || true)
  echo "$vol $invol"
}

# run_case CASE TARGET ROUND COMMAND...: runs COMMAND (output in logs/), records its exit code,
# the CPU both servers spent, their context switches and the load average, and parses the tool's
# output into results/CASE-TARGET-ROUND.json.
run_case() {
  local case=$1 target=$2 round=$3
  shift 3
  local name=$case-$target-r$round rc=0 k0 k1 p0=0 p1=0 u0=0 u1=0 pid=${PORTCULLIS_PIDS[$target]:-}
  local load_before
  load_before=$(loadavg)
  log "=== round $round: $case via $target"
  profile_start "$target" "$name"
  k0=$(cpu_ticks "$KAFKA_JAVA_PID") || die "Kafka is gone"
  [[ -n $pid ]] && { p0=$(cpu_ticks "$pid") && u0=$(user_ticks "$pid") || die "Portcullis ($target) is gone"; }
  local c0 c1 m0 m1 kw0 kw1 pw0=(0 0) pw1=(0 0)
  # Outside c0..c1: the readers are this shell's children too, and would count as client CPU.
  read -r -a kw0 <<<"$(ctxt_switches "$KAFKA_JAVA_PID")"
  [[ -n $pid ]] && read -r -a pw0 <<<"$(ctxt_switches "$pid")"
  read -r -a m0 <<<"$(machine_ticks)"
  c0=$(children_cpu_ticks)
  local t0=$EPOCHREALTIME
  "$@" >"$RUN_DIR/logs/$name.out" 2>"$RUN_DIR/logs/$name.err" || rc=$?
  local t1=$EPOCHREALTIME
  c1=$(children_cpu_ticks)
  read -r -a m1 <<<"$(machine_ticks)"
  read -r -a kw1 <<<"$(ctxt_switches "$KAFKA_JAVA_PID")"
  [[ -n $pid ]] && read -r -a pw1 <<<"$(ctxt_switches "$pid")"
  k1=$(cpu_ticks "$KAFKA_JAVA_PID") || die "Kafka died during $name"
  [[ -n $pid ]] && { p1=$(cpu_ticks "$pid") && u1=$(user_ticks "$pid") || die "Portcullis ($target) died during $name"; }
  profile_stop
  python3 scripts/lib/datapath_report.py parse --case "$case" --target "$target" --round "$round" \
    --rc "$rc" --out "$RUN_DIR/logs/$name.out" --err "$RUN_DIR/logs/$name.err" \
    --kafka-cpu-ticks $((k1 - k0)) --portcullis-cpu-ticks $((p1 - p0)) \
    --portcullis-user-ticks $((u1 - u0)) --hz "$(getconf CLK_TCK)" \
    --client-cpu-ticks $((c1 - c0)) --machine-busy-ticks $((m1[0] - m0[0])) \
    --machine-idle-ticks $((m1[1] - m0[1])) --machine-steal-ticks $((m1[2] - m0[2])) \
    --kafka-voluntary $((kw1[0] - kw0[0])) --kafka-involuntary $((kw1[1] - kw0[1])) \
    --portcullis-voluntary $((pw1[0] - pw0[0])) --portcullis-involuntary $((pw1[1] - pw0[1])) \
    --wall "$(python3 -c "print($t1 - $t0)")" --records "$records" --record-size "$record_size" \
    --load-before "$load_before" --load-after "$(loadavg)" >"$RUN_DIR/results/$name.json" ||
    log "warning: $name: could not parse the tool's output (counted as an error)"
}

perf_tool() { "${JAVA_TOOL[@]}" -cp "$KAFKA_LIB/*" "org.apache.kafka.tools.$1" "${@:2}"; }

IFS=, read -r -a batch_list <<<"$batch_sizes"
IFS=, read -r -a acks_values <<<"$acks_list"
# With N > 1 clients: the consume case's own topic, and partitions enough for N consumers.
consume_topic() { if (($1 == 1)); then echo dp-consume; else echo "dp-consume-c$1"; fi; }
many_partitions() { echo $(($1 > partitions ? $1 : partitions)); }
LATENCY_TOPIC=dp-latency
E2E_TOPIC=dp-e2e
if want_case consume; then
  for conns in "${conn_list[@]}"; do
    topic=$(consume_topic "$conns")
    fill_log=fill
    ((conns == 1)) || fill_log=fill-c$conns
    log "=== filling $topic with $records records (straight to Kafka)"
    topic_create "$topic" "$(many_partitions "$conns")"
    perf_tool ProducerPerformance --topic "$topic" --num-records "$records" \
      --record-size "$record_size" --throughput -1 --bootstrap-server "$KAFKA_BOOTSTRAP" \
      --command-config "$PLAIN_CONFIG" --command-property acks=1 batch.size=262144 linger.ms=20 \
      >"$RUN_DIR/logs/$fill_log.out" 2>"$RUN_DIR/logs/$fill_log.err" ||
      { cat "$RUN_DIR/logs/$fill_log.err" >&2; die "filling $topic failed"; }
  done
fi
if want_case latency || want_case latency-load; then topic_create "$LATENCY_TOPIC" 1; fi
want_case e2e && topic_create "$E2E_TOPIC" 1

# latency-load: the load's rate, a share of what one producer moves straight to Kafka. With the
# produce case's batch.size 16384 × acks=1 in the run, each round takes it from that case's
# direct run of the same round (just before); otherwise one calibration run, before the rounds.
LOAD_RATE=0
load_from_round() { # ROUND: sets LOAD_RATE from the round's direct produce run, if it has one
  local json=$RUN_DIR/results/produce-b16384-acks1-kafka-r$1.json direct_rate
  [[ -f $json ]] || return 1
  direct_rate=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("" if r["errors"] else r["metrics"]["msg_per_s"])' "$json")
  [[ -n $direct_rate ]] || return 1
  LOAD_RATE=$(python3 -c "print(max(1, round($load_fraction * $direct_rate)))")
  echo "load r$1:  latency-load carries $LOAD_RATE records/s of $record_size B each way (produce and consume) = $load_fraction × $direct_rate records/s, this round's direct produce run (batch.size 16384, acks=1)" |
    tee -a "$RUN_DIR/machine.txt" >&2
}
if want_case latency-load && ! { want_case produce && [[ ",$batch_sizes," == *,16384,* && ",$acks_list," == *,1,* ]] && ((${#conn_list[@]} > 0)) && [[ " ${conn_list[*]} " == *" 1 "* ]]; }; then
  log "=== calibrating the load: ProducerPerformance (batch.size 16384, acks=1) straight to Kafka"
  topic_create dp-load-calibration 1
  perf_tool ProducerPerformance --topic dp-load-calibration --num-records "$records" \
    --record-size "$record_size" --throughput -1 --bootstrap-server "$KAFKA_SASL_BOOTSTRAP" \
    --command-config "$CLIENT_CONFIG" --command-property acks=1 batch.size=16384 \
    >"$RUN_DIR/logs/fill-load-calibration.out" 2>"$RUN_DIR/logs/fill-load-calibration.err" ||
    { cat "$RUN_DIR/logs/fill-load-calibration.err" >&2; die "calibrating the load failed"; }
  topic_delete dp-load-calibration
  direct_rate=$(sed -n 's/^[0-9]* records sent, \([0-9.]*\) records\/sec.*/\1/p' \
    "$RUN_DIR/logs/fill-load-calibration.out" | tail -n1)
  [[ -n $direct_rate ]] || die "no ProducerPerformance summary in the calibration run"
  LOAD_RATE=$(python3 -c "print(max(1, round($load_fraction * $direct_rate)))")
  echo "load:      latency-load carries $LOAD_RATE records/s of $record_size B each way (produce and consume) = $load_fraction × $direct_rate records/s, one producer's throughput straight to Kafka (batch.size 16384, acks=1, measured before the rounds)" |
    tee -a "$RUN_DIR/machine.txt" >&2
fi

# latency_under_load BOOTSTRAP LOAD_TOPIC GROUP LOG_PREFIX: the latency probe while a
# ProducerPerformance sends LOAD_RATE records/s into LOAD_TOPIC and a ConsumerPerformance reads
# them, all through BOOTSTRAP. The load starts first and outlasts the probe; its summaries follow
# the probe's JSON on stdout (LOAD-PRODUCE / LOAD-CONSUME lines) and its stderr joins ours, so the
# report sees what it carried and any error it logged. Exits non-zero if any of the three failed.
latency_under_load() {
  local bootstrap=$1 load_topic=$2 group=$3 prefix=$4 rc=0 load_records producer consumer
  # The probe starts 3 s after the load, plus its JVM's start; the load outlasts it.
  load_records=$((LOAD_RATE * (latency_warmup + latency_seconds + 12)))
  perf_tool ProducerPerformance --topic "$load_topic" --num-records "$load_records" \
    --record-size "$record_size" --throughput "$LOAD_RATE" --bootstrap-server "$bootstrap" \
    --command-config "$CLIENT_CONFIG" --command-property acks=1 batch.size=16384 \
    >"$prefix.load-produce.log" 2>"$prefix.load-produce.stderr" &
  producer=$!
  LOAD_PIDS+=("$producer")
  perf_tool ConsumerPerformance --bootstrap-server "$bootstrap" --command-config "$CLIENT_CONFIG" \
    --topic "$load_topic" --num-records "$load_records" --group "$group" --timeout 30000 \
    >"$prefix.load-consume.log" 2>"$prefix.load-consume.stderr" &
  consumer=$!
  LOAD_PIDS+=("$consumer")
  # The load's clients connect and reach their rate before the probe's warm-up begins.
  sleep 3
  tool latency "$bootstrap" "$CLIENT_CONFIG" "$LATENCY_TOPIC" "$latency_rate" "$latency_seconds" \
    "$latency_warmup" "$record_size" "$latency_acks" || rc=$?
  wait "$producer" || { echo "ERROR: the load's producer exited with $?" >&2; rc=1; }
  wait "$consumer" || { echo "ERROR: the load's consumer exited with $?" >&2; rc=1; }
  LOAD_PIDS=()
  echo "LOAD-RATE $LOAD_RATE"
  echo "LOAD-RECORDS $load_records"
  sed 's/^/LOAD-PRODUCE /' "$prefix.load-produce.log"
  sed 's/^/LOAD-CONSUME /' "$prefix.load-consume.log"
  cat "$prefix.load-produce.stderr" "$prefix.load-consume.stderr" >&2
  return "$rc"
}

for ((round = 1; round <= rounds; round++)); do
  # Rotate the order so no target always runs first (cold caches) or last.
  order=()
  for ((i = 0; i < ${#targets[@]}; i++)); do
    order+=("${targets[$(((i + round - 1) % ${#targets[@]}))]}")
  done
  if want_case consume; then
    for conns in "${conn_list[@]}"; do
      for target in "${order[@]}"; do
        if ((conns == 1)); then
          run_case consume "$target" "$round" perf_tool ConsumerPerformance \
            --bootstrap-server "${BOOTSTRAPS[$target]}" --command-config "$CLIENT_CONFIG" \
            --topic dp-consume --num-records "$records" --group "dp-c-$target-$round-$$" \
            --timeout 30000 --print-metrics
        else
          run_case "consume-c$conns" "$target" "$round" many_tool consume-many \
            "${BOOTSTRAPS[$target]}" "$CLIENT_CONFIG" "$(consume_topic "$conns")" "$conns" \
            "$records" "dp-c$conns-$target-$round-$$" 30000
        fi
      done
    done
  fi
  if want_case produce; then
    for batch in "${batch_list[@]}"; do
      for acks in "${acks_values[@]}"; do
        for conns in "${conn_list[@]}"; do
          for target in "${order[@]}"; do
            if ((conns == 1)); then
              topic="dp-p-$batch-$acks-$target-$round"
              topic_create "$topic" "$partitions"
              run_case "produce-b$batch-acks$acks" "$target" "$round" perf_tool ProducerPerformance \
                --topic "$topic" --num-records "$records" --record-size "$record_size" \
                --throughput -1 --bootstrap-server "${BOOTSTRAPS[$target]}" \
                --command-config "$CLIENT_CONFIG" --command-property "acks=$acks" "batch.size=$batch" \
                --print-metrics
            else
              topic="dp-p-$batch-$acks-c$conns-$target-$round"
              topic_create "$topic" "$(many_partitions "$conns")"
              run_case "produce-b$batch-acks$acks-c$conns" "$target" "$round" many_tool produce-many \
                "${BOOTSTRAPS[$target]}" "$CLIENT_CONFIG" "$topic" "$conns" "$records" \
                "$record_size" "$batch" "$acks"
            fi
            # Keep the disk bounded: each run writes records × record size.
            topic_delete "$topic"
          done
        done
      done
    done
  fi
  if want_case latency; then
    for target in "${order[@]}"; do
      run_case latency "$target" "$round" tool latency "${BOOTSTRAPS[$target]}" "$CLIENT_CONFIG" \
        "$LATENCY_TOPIC" "$latency_rate" "$latency_seconds" "$latency_warmup" "$record_size" \
        "$latency_acks"
    done
  fi
  if want_case latency-load; then
    load_from_round "$round" || ((LOAD_RATE > 0)) || die "no direct produce run in round $round to size the load by"
    for target in "${order[@]}"; do
      topic=dp-load-$target-$round
      topic_create "$topic" 1
      run_case latency-load "$target" "$round" latency_under_load "${BOOTSTRAPS[$target]}" \
        "$topic" "dp-load-$target-$round-$$" "$RUN_DIR/logs/latency-load-$target-r$round"
      topic_delete "$topic"
    done
  fi
  if want_case e2e; then
    for target in "${order[@]}"; do
      run_case e2e "$target" "$round" perf_tool EndToEndLatency \
        --bootstrap-server "${BOOTSTRAPS[$target]}" --topic "$E2E_TOPIC" \
        --num-records "$e2e_records" --producer-acks 1 --record-size "$record_size" \
        --command-config "$CLIENT_CONFIG"
    done
  fi
done

# ---------------------------------------------------------------------------------------------
# 4. Report

if [[ $profile == perf ]]; then
  for data in "$RUN_DIR"/profiles/*.perf.data; do
    [[ -f $data ]] || continue
    {
      perf report -i "$data" --no-children --sort dso -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$'
      echo
      perf report -i "$data" --no-children --sort dso,symbol -g none --percent-limit 0.5 --stdio 2>/dev/null |
        grep -v '^#' | grep -v '^$' | head -n 60
    } >"${data%.data}.txt" || true
  done
fi
if [[ $profile == trace ]]; then
  for trace in "$RUN_DIR"/profiles/*.trace.txt; do
    [[ -f $trace ]] || continue
    python3 scripts/lib/syscall_gaps.py "$trace" >"${trace%.txt}.gaps.txt" ||
      log "warning: scripts/lib/syscall_gaps.py failed on $trace"
  done
fi
if ((telemetry)); then
  # The spans did reach Jaeger: the traces (one per client connection) it returns for the
  # exporting nodes, up to 50 (a larger limit makes this Jaeger answer 500).
  python3 - "$JAEGER_QUERY" >"$RUN_DIR/jaeger/traces.txt" 2>&1 <<'PY' || true
import json, sys, urllib.request
url = sys.argv[1] + "/api/traces?service=portcullis-bench&limit=50&lookback=1h"
try:
    data = json.load(urllib.request.urlopen(url, timeout=60))["data"]
    print(f"Jaeger returned {len(data)} traces (limit 50) with {sum(len(t['spans']) for t in data)} "
          "spans of service portcullis-bench")
except Exception as e:  # the figures stand without it; say why it is missing
    print(f"querying Jaeger failed: {e}")
PY
  log "$(cat "$RUN_DIR/jaeger/traces.txt")"
fi
python3 scripts/lib/datapath_report.py report "$RUN_DIR" | tee "$RUN_DIR/results.md"
# The counts and gaps go with the figures they explain (the run directory may not be kept).
for summary in "$RUN_DIR"/profiles/*.syscalls.txt "$RUN_DIR"/profiles/*.gaps.txt; do
  [[ -f $summary ]] || continue
  printf '\n## Profile: %s\n\n```\n%s\n```\n' "${summary##*/}" "$(grep -v '^#' "$summary" | grep .)" |
    tee -a "$RUN_DIR/results.md"
done
if ((telemetry)); then tee -a "$RUN_DIR/results.md" <"$RUN_DIR/jaeger/traces.txt"; fi
mkdir -p "$TARGET_DIR/bench"
saved=$TARGET_DIR/bench/datapath-$(date -u +%Y%m%dT%H%M%SZ).md
cp "$RUN_DIR/results.md" "$saved"
log "results saved to $saved"
python3 scripts/lib/datapath_report.py check "$RUN_DIR" || die "some runs had errors (see above)"
