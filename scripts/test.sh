#!/usr/bin/env bash
# Portcullis' full test run: first checks formatting, clippy and rustdoc (fast, nothing installed;
# a failure stops the run there), then installs what the tests need (Kafka jars, Python venv,
# kcat), builds the workspace, runs `cargo test --workspace`, starts ONE Apache Kafka for the whole
# run and runs against it, side by side: the host's tests that need Kafka, the pytest interop suite
# (tests/interop, its files spread over parallel workers) and its kafka-store variant.
# Prints a summary at the end and exits non-zero if any step failed.
#
# Usage: scripts/test.sh [--full] [--workers N] [--interop-only] [--no-quickstart]
#                        [--target portcullis|kafka] [--keep] [--no-lint] [--fuzz SECONDS]
#                        [-- PYTEST_ARGS...]
#   --full           also the long tests (marked `long`: chaos, soak, 60-s client runs) and every
#                    fuzz target for 30 s on its kept corpus (scripts/fuzz.sh); CI runs it
#   --fuzz SECONDS   each fuzz target for SECONDS (0: none; default 30 with --full and no
#                    PYTEST_ARGS, else 0)
#   --workers N      parallel pytest workers for the interop suite (default 3; 0: one process)
#   --interop-only   skip `cargo test` (still builds the portcullis binary)
#   --no-quickstart  skip the final `scripts/quickstart.sh --exit` smoke run
#   --target kafka   run the client tests straight against Kafka's SASL listener (checks the suite
#                    itself; Portcullis-only tests are deselected)
#   --keep           keep the run directory (configs, Kafka and Portcullis logs) even on success
#   --no-lint        skip the fmt/clippy/doc step (to iterate on one test by hand; CI never does)
#   PYTEST_ARGS      passed to pytest, e.g. -- -k kcat -x
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
# shellcheck source=lib/oidc.sh
source scripts/lib/oidc.sh

interop_only=0
full=0
workers=${INTEROP_WORKERS:-3}
quickstart=1
target=portcullis
keep=0
lint=1
fuzz_time=
pytest_args=()
while (($#)); do
  case "$1" in
    --interop-only) interop_only=1 ;;
    --full) full=1 ;;
    --workers) workers=${2:?--workers needs a number}; shift ;;
    --no-quickstart) quickstart=0 ;;
    --target) target=${2:?--target needs portcullis or kafka}; shift ;;
    --keep) keep=1 ;;
    --no-lint) lint=0 ;;
    --fuzz) fuzz_time=${2:?--fuzz needs a number of seconds}; shift ;;
    --) shift; pytest_args=("$@"); break ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
[[ $target == portcullis || $target == kafka ]] || die "--target must be portcullis or kafka"
# A by-hand selection (-- PYTEST_ARGS) runs no fuzzing unless asked for.
[[ -n $fuzz_time ]] || fuzz_time=$((full && ${#pytest_args[@]} == 0 ? 30 : 0))
[[ $fuzz_time =~ ^[0-9]+$ ]] || die "--fuzz takes a whole number of seconds"
[[ $workers =~ ^[0-9]+$ ]] || die "--workers must be a number"

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-test.XXXXXX")
export INTEROP_RUN_DIR=$RUN_DIR
summary=()
failed=0

# step NAME CMD...: runs one step, records its outcome and duration; never aborts the script.
step() {
  local name=$1 start=$SECONDS rc=0
  shift
  log "=== $name"
  "$@" || rc=$?
  if ((rc == 0)); then
    summary+=("PASS  $(printf '%-28s' "$name") $((SECONDS - start))s")
  else
    summary+=("FAIL  $(printf '%-28s' "$name") $((SECONDS - start))s (exit $rc)")
    failed=1
  fi
  return "$rc"
}

# Steps that run side by side with the rest: each in a process group of its own (so an interrupted
# run can end it whole), its output in a file of the run directory, shown when it is collected.
bg_pids=()
bg_names=()
bg_logs=()

# bg_step NAME CMD...: starts a step in the background; collect_bg_steps waits for it.
bg_step() {
  local name=$1 logf
  shift
  logf="$RUN_DIR/step-$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '-').log"
  log "=== $name (side by side; output in $logf)"
  set -m # a process group of its own
  (
    start=$SECONDS rc=0
    "$@" || rc=$?
    printf '%s %s\n' "$rc" "$((SECONDS - start))" >"$logf.rc"
    exit "$rc"
  ) >"$logf" 2>&1 &
  set +m
  bg_pids+=("$!")
  bg_names+=("$name")
  bg_logs+=("$logf")
}

# collect_bg_steps: waits for every background step, prints its output and records its outcome.
collect_bg_steps() {
  local i rc secs
  for i in "${!bg_pids[@]}"; do
    wait "${bg_pids[i]}" || true
    log "=== $(basename "${bg_logs[i]}") (${bg_names[i]}, ran side by side):"
    cat "${bg_logs[i]}" >&2 || true
    read -r rc secs <"${bg_logs[i]}.rc" 2>/dev/null || { rc=1 secs=0; }
    if ((rc == 0)); then
      summary+=("PASS  $(printf '%-28s' "${bg_names[i]}") ${secs}s (side by side)")
    else
      summary+=("FAIL  $(printf '%-28s' "${bg_names[i]}") ${secs}s (exit $rc, side by side)")
      failed=1
    fi
  done
  bg_pids=()
  bg_names=()
  bg_logs=()
}

finish() {
  local rc=$?
  ((rc == 0)) || failed=1
  local pid
  for pid in "${bg_pids[@]}"; do # an interrupted run: end the steps still running, whole
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  kafka_stop
  oidc_stop
  if ((failed)); then
    kafka_dump_log 80
    if [[ -n ${OIDC_LOG:-} && -f $OIDC_LOG ]]; then
      log "---- last 40 lines of $OIDC_LOG ----"
      tail -n 40 "$OIDC_LOG" >&2 || true
    fi
    local f
    for f in "$RUN_DIR"/interop/*/portcullis-*/portcullis.log "$RUN_DIR"/kafka-store/interop/*/portcullis-*/portcullis.log; do
      [[ -f $f ]] || continue
      log "---- last 60 lines of $f ----"
      tail -n 60 "$f" >&2 || true
    done
  fi
  echo
  echo "================ Portcullis test summary ================"
  local line
  for line in "${summary[@]}"; do echo "  $line"; done
  [[ -f $RUN_DIR/pytest-summary.txt ]] && echo "  interop: $(cat "$RUN_DIR/pytest-summary.txt")"
  [[ -f $RUN_DIR/pytest-kafka-store-summary.txt ]] &&
    echo "  interop (kafka store): $(cat "$RUN_DIR/pytest-kafka-store-summary.txt")"
  # The slowest interop tests of the run (both suites), where the suite's time goes.
  if [[ -f $RUN_DIR/interop-junit.xml && -n ${PORTCULLIS_VENV:-} ]]; then
    echo "  slowest tests:"
    "$PORTCULLIS_VENV/bin/python" scripts/lib/slowest_tests.py 10 "$RUN_DIR/interop-junit.xml" \
      "$RUN_DIR/interop-kafka-store-junit.xml" 2>/dev/null | sed 's/^/  /' || true
  fi
  # The failing tests, with pytest's one-line reason, last: a CI log is often read from its end.
  local out
  for out in "$RUN_DIR/pytest-output.txt" "$RUN_DIR/pytest-kafka-store-output.txt"; do
    [[ -f $out ]] || continue
    grep -E '^(FAILED|ERROR) [^ ]+\.py' "$out" | cut -c1-400 | sed "s|^|  $(basename "$out" .txt): |" || true
  done
  # And the last lines of the failures' own messages (pytest's `E ` lines), which the one-line
  # reason cuts at its first line break: often all a CI log keeps of a rare failure.
  for out in "$RUN_DIR/pytest-output.txt" "$RUN_DIR/pytest-kafka-store-output.txt"; do
    [[ -f $out ]] && grep -qE '^(FAILED|ERROR) [^ ]+\.py' "$out" || continue
    echo "  last failure lines of $(basename "$out" .txt):"
    grep -E '^E ' "$out" | tail -n 25 | cut -c1-300 | sed 's/^/    /' || true
  done
  if ((failed)) && ! ((keep)) && rmdir "$RUN_DIR" 2>/dev/null; then
    : # nothing in it (the run stopped before writing anything, e.g. at the lint step)
  elif ((failed)) || ((keep)); then
    echo "  run directory kept: $RUN_DIR"
  else
    rm -rf "$RUN_DIR"
  fi
  if ((failed)); then
    echo "  RESULT: FAILED"
    exit 1
  fi
  echo "  RESULT: OK"
  exit 0
}
trap finish EXIT
trap 'exit 130' INT TERM

# The guardrails (docs/architecture.md, "Guardrails"): formatting, clippy with the workspace lints
# and rustdoc, all three run so one pass shows every problem. Needs only cargo, so it runs before
# anything heavy is installed, and a failure ends the run here.
lint_check() {
  local failed_cmds=() cmd
  local -a checks=(
    "cargo fmt --all --check"
    "cargo clippy --workspace --all-targets -- -D warnings"
    "RUSTDOCFLAGS='-D warnings' cargo doc --no-deps --workspace"
    # The fuzz crate is outside the workspace; checking it also keeps its targets compiling.
    "cargo fmt --manifest-path fuzz/Cargo.toml --check"
    "cargo clippy --locked --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings"
  )
  for cmd in "${checks[@]}"; do
    log "lint: $cmd"
    # Fixed strings from the list above; eval only to apply the RUSTDOCFLAGS prefix.
    eval "$cmd" || failed_cmds+=("$cmd")
  done
  ((${#failed_cmds[@]} == 0)) && return 0
  log "lint FAILED. Fix it, then check locally with:"
  for cmd in "${failed_cmds[@]}"; do log "    $cmd"; done
  [[ " ${failed_cmds[*]} " == *"cargo fmt"* ]] &&
    log "    (cargo fmt --all, and cargo fmt --manifest-path fuzz/Cargo.toml, rewrite the files)"
  return 1
}

# The WASM plugin tests (plugins/wasm/tests, tests/interop/test_wasm_plugins.py) build
# examples/wasm for wasm32-wasip2; `rustup target add` is a no-op when it is installed already.
ensure_wasm_target() {
  rustup target add wasm32-wasip2
}

install_deps() {
  require_tools cargo java javac mvn python3 openssl node npm
  ensure_wasm_target || return 1
  ensure_kcat
  ensure_kafka_deps
  ensure_venv
  # The OpenID provider (oidc-provider) and kafkajs for the OAUTHBEARER tests, with npm ci from
  # their lock files into $PORTCULLIS_CACHE/node (scripts/lib/oidc.sh).
  ensure_oidc_deps
  ensure_kafkajs
}

TARGET_DIR=$(cargo_target_dir)
export PORTCULLIS_BIN="$TARGET_DIR/debug/portcullis"
# Where the interop tests find other build outputs (e.g. the example plugin's .so).
export INTEROP_CARGO_TARGET_DIR=$TARGET_DIR

# What selects and spreads the interop tests: without --full the long tests are left out (a
# by-hand selection after -- decides for itself); with workers, pytest-xdist hands out a test file
# (or a group of files that share state, tests/interop/conftest.py) at a time.
interop_selection=()
if ((!full)) && ((${#pytest_args[@]} == 0)); then
  interop_selection+=(-m "not long")
fi
if ((workers > 0)); then
  interop_selection+=(-n "$workers" --dist loadgroup)
fi

run_pytest() {
  local out=$RUN_DIR/pytest-output.txt rc=0
  # A third of the free-port pool each for this, the kafka-store variant and the quickstart, which
  # run side by side (scripts/lib/free_ports.py).
  FREE_PORT_SLICE=0/3 INTEROP_TARGET=$target "$PORTCULLIS_VENV/bin/python" -m pytest tests/interop -q \
    --durations=10 --junitxml="$RUN_DIR/interop-junit.xml" "${interop_selection[@]}" "${pytest_args[@]}" \
    2>&1 | tee "$out" || rc=$?
  # pytest's final line ("N passed, M failed in Xs") for the summary.
  grep -E '^(=+ )?[0-9]+ (passed|failed|error)|no tests ran' "$out" | tail -n 1 | tr -d '=' |
    sed 's/^ *//' >"$RUN_DIR/pytest-summary.txt" || true
  return "$rc"
}

if ((lint)); then
  step "lint (fmt, clippy, doc)" lint_check || exit 1
fi
step "install dependencies" install_deps || exit 1
if ((interop_only)) && [[ $target == kafka ]]; then
  : # nothing to build: the clients talk to Kafka directly
elif ((interop_only)); then
  step "cargo build portcullis" cargo build -p portcullis-host || exit 1
else
  step "cargo build --workspace" cargo build --workspace || exit 1
  step "cargo test --workspace" cargo test --workspace || true
fi
if [[ $target == portcullis && ! -x $PORTCULLIS_BIN ]]; then
  summary+=("FAIL  no binary at $PORTCULLIS_BIN")
  exit 1
fi
# Jaeger all-in-one for tests/interop/test_telemetry.py: built once from the Go module and cached
# in ~/.cache/portcullis (cold: minutes; warm: nothing to do).
ensure_jaeger() {
  JAEGER_BIN=$(scripts/lib/jaeger.sh) || return 1
  export JAEGER_BIN
}
if [[ $target == portcullis ]]; then
  step "jaeger (scripts/lib/jaeger.sh)" ensure_jaeger || true
fi
# The OpenID provider for the OAUTHBEARER tests (tests/interop/test_oauth*.py): before Kafka, whose
# OAUTH listener fetches the provider's key set at start. Exports OIDC_* (scripts/lib/oidc.sh).
step "start oidc provider" oidc_start "$RUN_DIR/oidc" || exit 1
# The shared Kafka, with its OAUTH listener (KIP-768 validator against the provider's key set, on a
# JWKS URL of its own so its fetches are counted apart); the KAFKA_OAUTH_* settings are given to
# this broker only, not exported to the suite (tests that start brokers of their own get none).
start_shared_kafka() {
  KAFKA_OAUTH_JWKS_URL=$OIDC_KAFKA_JWKS_URL KAFKA_OAUTH_ISSUER=$OIDC_ISSUER KAFKA_OAUTH_AUDIENCE=$OIDC_AUDIENCE \
    KAFKA_OAUTH_SUPER_USERS="User:$OIDC_CLIENT_ID" kafka_start "$RUN_DIR/kafka" && kafka_wait_group_coordinator
}
step "start kafka" start_shared_kafka || exit 1

# The host's own integration tests (host/tests/server_kafka.rs) need the running Kafka; they are
# #[ignore]d in the plain `cargo test` run above and run here against it.
run_host_kafka_tests() {
  PORTCULLIS_TEST_KAFKA=$KAFKA_BOOTSTRAP \
    PORTCULLIS_TEST_KAFKA_SASL=$KAFKA_SASL_BOOTSTRAP \
    PORTCULLIS_TEST_KAFKA_SASL_USER=$KAFKA_SASL_USER \
    PORTCULLIS_TEST_KAFKA_SASL_PASSWORD=$KAFKA_SASL_PASSWORD \
    cargo test -p portcullis-host --test server_kafka --test telemetry_spans --test telemetry_metrics -- --ignored &&
    PORTCULLIS_TEST_KAFKA=$KAFKA_BOOTSTRAP \
      cargo test -p portcullis-plugin-kafka-store --test kafka -- --ignored
}
if ((!interop_only)) && [[ $target == portcullis ]]; then
  bg_step "host tests against kafka" run_host_kafka_tests
fi

# The same clients against single nodes whose store is a topic of the suite's Kafka
# (`[store] kind = "kafka"`, tests/interop/cluster_support.py): a subset of the suite, chosen for
# the security APIs and the data path with several client libraries, so that the variant stays
# within a few minutes (docs/testing.md). Not run with -- PYTEST_ARGS (a by-hand selection).
KAFKA_STORE_SUBSET=(
  tests/interop/test_acl_tools.py tests/interop/test_audit_and_credentials.py
  tests/interop/test_confluent.py tests/interop/test_kafka_python.py tests/interop/test_tls.py
  tests/interop/test_delegation_tokens.py::test_confluent_and_kcat_log_in_with_a_token_when_the_extension_is_not_needed
)
run_pytest_kafka_store() {
  local out=$RUN_DIR/pytest-kafka-store-output.txt rc=0
  FREE_PORT_SLICE=1/3 INTEROP_STORE=kafka INTEROP_RUN_DIR=$RUN_DIR/kafka-store INTEROP_TARGET=$target \
    "$PORTCULLIS_VENV/bin/python" -m pytest "${KAFKA_STORE_SUBSET[@]}" -q -p no:xdist \
    --junitxml="$RUN_DIR/interop-kafka-store-junit.xml" 2>&1 | tee "$out" || rc=$?
  grep -E '^(=+ )?[0-9]+ (passed|failed|error)|no tests ran' "$out" | tail -n 1 | tr -d '=' |
    sed 's/^ *//' >"$RUN_DIR/pytest-kafka-store-summary.txt" || true
  return "$rc"
}
if [[ $target == portcullis ]] && ((${#pytest_args[@]} == 0)); then
  mkdir -p "$RUN_DIR/kafka-store"
  bg_step "interop tests (kafka store)" run_pytest_kafka_store
fi

run_quickstart() {
  # Its own Kafka and Portcullis, on free ports of its own part of the pool; output kept in the run
  # directory.
  local rc=0
  FREE_PORT_SLICE=2/3 scripts/quickstart.sh --exit >"$RUN_DIR/quickstart.log" 2>&1 || rc=$?
  if ((rc != 0)); then
    log "---- last 60 lines of $RUN_DIR/quickstart.log ----"
    tail -n 60 "$RUN_DIR/quickstart.log" >&2
  fi
  return "$rc"
}
if ((quickstart)) && [[ $target == portcullis ]]; then
  bg_step "quickstart --exit" run_quickstart
fi

# Every fuzz target on its kept corpus (fuzz/corpus), side by side with the interop suite at the
# lowest CPU priority: it takes only what the tests leave idle, so it neither slows them nor adds
# to the run's time (its builds live in the cache, apart from CARGO_TARGET_DIR). A crash fails the
# run, with the input kept in the run directory.
run_fuzz() {
  FUZZ_RUN_DIR=$RUN_DIR/fuzz nice -n 19 scripts/fuzz.sh --time "$fuzz_time"
}
if ((fuzz_time > 0)); then
  bg_step "fuzz (${fuzz_time}s per target)" run_fuzz
fi

step "interop tests ($target)" run_pytest || true
collect_bg_steps
