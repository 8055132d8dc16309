#!/usr/bin/env bash
# Helpers shared by the benchmark scripts (bench.sh, bench-datapath.sh). Source it after
# common.sh and kafka.sh; do not run it.

# stat_fields PID: the fields of /proc/PID/stat from the third on, space-separated. The command
# name in field 2 may hold spaces, so the fields are counted from the last ')'.
stat_fields() {
  local stat
  stat=$(cat "/proc/$1/stat") || return 1
  echo "${stat##*) }"
}

# stat_ticks PID FIELD: the sum of a pair of clock-tick fields of /proc/PID/stat, FIELD being the
# first's number (14: utime + stime, the process with all its threads; 16: cutime + cstime, its
# children that have exited and been waited for).
stat_ticks() {
  local fields
  fields=$(stat_fields "$1") || return 1
  local -a f
  read -r -a f <<<"$fields"
  echo $((f[$2 - 3] + f[$2 - 2]))
}

# cpu_ticks PID: user+system CPU of a process (all its threads) in clock ticks.
cpu_ticks() { stat_ticks "$1" 14; }

# user_ticks PID: the user-space part of cpu_ticks (utime alone): what the process' own code
# costs, apart from the kernel's work for its system calls, copies and wake-ups.
user_ticks() {
  local fields
  fields=$(stat_fields "$1") || return 1
  local -a f
  read -r -a f <<<"$fields"
  echo "${f[11]}"
}

# children_cpu_ticks: user+system CPU of this shell's waited-for children: read before and after
# a command, the difference is what the command (e.g. a client JVM) spent.
children_cpu_ticks() { stat_ticks "$$" 16; }

# machine_ticks: "BUSY IDLE STEAL" clock ticks of all CPUs together since boot, from the first
# line of /proc/stat (busy: user, nice, system, irq, softirq; idle: idle, iowait; steal: time the
# hypervisor gave the virtual CPUs to someone else). Differences over a run tell whether the run
# had the machine's cores to itself or was short of CPU.
machine_ticks() {
  local _cpu user nice system idle iowait irq softirq steal _rest
  read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
  echo "$((user + nice + system + irq + softirq)) $((idle + iowait)) $steal"
}

# kafka_java_pid PID: the JVM behind KAFKA_PID (the pid itself if it is java, else its java
# child), so CPU is read from the broker and not from a wrapper shell.
kafka_java_pid() {
  local pid=$1 child
  if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == java ]]; then
    echo "$pid"
    return 0
  fi
  for child in $(cat "/proc/$pid/task/$pid/children" 2>/dev/null || pgrep -P "$pid"); do
    if [[ $(cat "/proc/$child/comm" 2>/dev/null) == java ]]; then
      echo "$child"
      return 0
    fi
  done
  return 1
}

# loadavg: the 1/5/15-minute load averages.
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# bench_start_portcullis DIR BIN [EXTRA_TOML]: a Portcullis node in DIR (config, data, log) in
# front of the Kafka started by kafka_start (upstream = its PLAINTEXT listener, passthrough
# policy), with the users "$KAFKA_SASL_USER" and "$KAFKA_ADMIN_USER" added with their Kafka
# passwords for SCRAM-SHA-512 and SCRAM-SHA-256 (PLAIN checks against them). EXTRA_TOML is
# appended to the config (e.g. an [authorizer] table). Sets BENCH_PORTCULLIS_PID and
# BENCH_PORTCULLIS_BOOTSTRAP; the caller stops the pid.
bench_start_portcullis() {
  local dir=$1 bin=$2 extra=${3:-} ports listen_port broker_port
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
$extra
TOML
  local mech user pass
  for user in "$KAFKA_SASL_USER:$KAFKA_SASL_PASSWORD" "$KAFKA_ADMIN_USER:$KAFKA_ADMIN_PASSWORD"; do
    pass=${user#*:}
    for mech in SCRAM-SHA-512 SCRAM-SHA-256; do
      printf '%s\n' "$pass" |
        "$bin" scram add --config "$dir/portcullis.toml" --user "${user%%:*}" \
          --mechanism "$mech" --password-stdin >>"$dir/scram-add.log" 2>&1 ||
        { cat "$dir/scram-add.log" >&2; die "portcullis scram add ${user%%:*} $mech failed"; }
    done
  done
  log "starting Portcullis ($dir) on 127.0.0.1:$listen_port (broker 1 at 127.0.0.1:$broker_port)"
  # The default level, set explicitly so a RUST_LOG=debug in the caller's shell cannot turn on
  # per-request logging and skew the result.
  (cd "$dir" && RUST_LOG=info exec "$bin" serve --config "$dir/portcullis.toml") \
    >"$dir/portcullis.log" 2>&1 &
  BENCH_PORTCULLIS_PID=$!
  wait_for_port 127.0.0.1 "$listen_port" 30 "$BENCH_PORTCULLIS_PID" &&
    wait_for_port 127.0.0.1 "$broker_port" 30 "$BENCH_PORTCULLIS_PID" ||
    die "Portcullis did not open its ports (log: $dir/portcullis.log)"
  BENCH_PORTCULLIS_BOOTSTRAP=127.0.0.1:$listen_port
}
