#!/usr/bin/env bash
# The cluster benchmarks of docs/benchmarks.md ("Cluster"): mutation latency through a follower vs
# on the writer (three nodes, scripts/bench_cluster.py), and the replay time of a metadata topic
# of RECORDS records (plugins/kafka-store/examples/replay.rs). Starts its own Kafka; release build.
#
# Usage: scripts/bench-cluster.sh [--samples N] [--records N]
# Environment: CARGO_TARGET_DIR, PORTCULLIS_CACHE.

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

samples=300
records=1000000
while (($#)); do
  case "$1" in
    --samples) samples=${2:?}; shift ;;
    --records) records=${2:?}; shift ;;
    *) die "unknown argument: $1" ;;
  esac
  shift
done

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-bench-cluster.XXXXXX")
trap 'kafka_stop; rm -rf "$RUN_DIR"' EXIT
ensure_kafka_deps
ensure_venv
cargo build --release -p portcullis-host -p portcullis-plugin-kafka-store --example replay
TARGET_DIR=$(cargo_target_dir)
kafka_start "$RUN_DIR/kafka"
log "=== mutation latency: writer vs follower ($samples samples each)"
PORTCULLIS_BIN="$TARGET_DIR/release/portcullis" BENCH_RUN_DIR=$RUN_DIR \
  "$PORTCULLIS_VENV/bin/python" scripts/bench_cluster.py "$samples"
log "=== replay of $records records"
"$TARGET_DIR/release/examples/replay" "$KAFKA_BOOTSTRAP" "$records"
