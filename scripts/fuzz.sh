#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ (libFuzzer through libfuzzer-sys) for a given time each, starting
# from the corpora kept in the repository (fuzz/corpus/<target>), and prints what each run did:
# executions, CPU seconds (user + system of the fuzzer process), coverage (libFuzzer's `cov`,
# edges reached), corpus size, result.
#
#   scripts/fuzz.sh                         # every target, 30 s each (what scripts/test.sh runs)
#   scripts/fuzz.sh --time 3600 envelope    # one target for an hour
#   scripts/fuzz.sh --time 600 --jobs 2     # every target, two at a time
#   scripts/fuzz.sh --merge --time 300      # ... and add what found new coverage to fuzz/corpus
#   scripts/fuzz.sh --ledger fuzz/ledger.tsv --time 900   # ... and append each run's CPU time there
#   scripts/fuzz.sh --cpu 3600 envelope     # until the fuzzer has used an hour of CPU (however
#                                           # long that takes beside other work)
#   scripts/fuzz.sh --list
#
# Built with the toolchain of rust-toolchain.toml, not nightly and not cargo-fuzz: the same
# coverage instrumentation cargo-fuzz passes to rustc (sancov, 8-bit counters, comparison
# tracing) and `--cfg fuzzing`, with debug assertions and overflow checks on. No AddressSanitizer
# (that needs nightly); the code under test is safe Rust, where a bug shows as a panic, an abort
# or an allocation failure, all of which libFuzzer reports as a crash.
#
# Inputs found during a run go to a scratch directory; the kept corpus changes only with --merge
# (libFuzzer's merge: only inputs that add coverage, minimised). A crash exits non-zero and keeps
# the crashing input under the run directory (printed), to be turned into a regression test.
#
# Environment: PORTCULLIS_CACHE (default ~/.cache/portcullis; the instrumented build lives in
# $PORTCULLIS_CACHE/fuzz-target, apart from CARGO_TARGET_DIR because its flags differ),
# FUZZ_RUN_DIR (where logs and crashes go; default a new temporary directory).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib/common.sh
source "$ROOT/scripts/lib/common.sh"

TIME=30
CPU_BUDGET=0
JOBS=1
MERGE=0
LIST=0
LEDGER=""
TARGETS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --time) TIME="$2"; shift 2 ;;
    --cpu) CPU_BUDGET="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --merge) MERGE=1; shift ;;
    --list) LIST=1; shift ;;
    --ledger) LEDGER="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[[ "$TIME" =~ ^[0-9]+$ && "$TIME" -gt 0 ]] || die "--time takes a whole number of seconds"
[[ "$CPU_BUDGET" =~ ^[0-9]+$ ]] || die "--cpu takes a whole number of seconds"
[[ "$JOBS" =~ ^[0-9]+$ && "$JOBS" -gt 0 ]] || die "--jobs takes a positive number"

# Every [[bin]] of fuzz/Cargo.toml is a target.
mapfile -t ALL < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^portcullis-fuzz$')
if [[ $LIST -eq 1 ]]; then
  printf '%s\n' "${ALL[@]}"
  exit 0
fi
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=("${ALL[@]}")
fi
for t in "${TARGETS[@]}"; do
  printf '%s\n' "${ALL[@]}" | grep -qx "$t" || die "no fuzz target '$t' (scripts/fuzz.sh --list)"
done

CACHE="${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}"
HOST_TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
BUILD_DIR="$CACHE/fuzz-target"
RUN_DIR="${FUZZ_RUN_DIR:-$(mktemp -d -t portcullis-fuzz.XXXXXX)}"
mkdir -p "$RUN_DIR"

# The flags cargo-fuzz gives rustc for libFuzzer without a sanitizer. `--target` keeps them off
# build scripts and proc macros.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
log "building ${#TARGETS[@]} fuzz target(s) in $BUILD_DIR"
bins=()
for t in "${TARGETS[@]}"; do bins+=(--bin "$t"); done
CARGO_TARGET_DIR="$BUILD_DIR" cargo build --locked --release --quiet \
  --manifest-path fuzz/Cargo.toml --target "$HOST_TRIPLE" "${bins[@]}"
BIN_DIR="$BUILD_DIR/$HOST_TRIPLE/release"

# One target: the kept corpus read, new inputs written to scratch, crashes to the run dir.
# Prints one summary line: target seconds execs cov corpus result.
#
# With --cpu, the fuzzer runs again (on the kept corpus and what the runs before found) until its
# CPU time adds up to the budget: at nice 19 on a busy machine a target gets far less CPU than wall
# time, and a fuzzing budget counts CPU. Each run is at most the CPU still missing, in wall time.
fuzz_one() {
  local t="$1" dir="$RUN_DIR/$1"
  mkdir -p "$dir/new" "$ROOT/fuzz/corpus/$t"
  local started rc=0 cpu=0 execs=0 run=0
  started=$(date +%s)
  while :; do
    run=$((run + 1))
    local limit="$TIME"
    [[ $CPU_BUDGET -gt 0 ]] && limit=$((CPU_BUDGET - cpu))
    # Bash's `time` keyword reports the child's user and system seconds.
    local TIMEFORMAT='%U %S'
    { time "$BIN_DIR/$t" "$dir/new" "$ROOT/fuzz/corpus/$t" \
      -max_total_time="$limit" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$dir/" >"$dir/log" 2>&1 || rc=$?; } 2>"$dir/times"
    cp "$dir/log" "$dir/log.$run"
    cpu=$(( cpu + $(awk '{ printf "%.0f", $1 + $2 }' "$dir/times" 2>/dev/null || echo 0) ))
    local ran
    ran=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
    execs=$(( execs + ${ran:-0} ))
    [[ $rc -ne 0 || $CPU_BUDGET -eq 0 || $cpu -ge $CPU_BUDGET ]] && break
  done
  local seconds=$(( $(date +%s) - started ))
  local cov corpus result=ok
  cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2)
  if [[ $rc -ne 0 ]]; then
    # libFuzzer names the input it stopped on crash-*, timeout-*, oom- or slow-unit-*.
    result="CRASH (exit $rc): $(find "$dir" -maxdepth 1 -type f -name '*-*' ! -name 'log*' | head -1)"
  elif [[ $MERGE -eq 1 ]]; then
    "$BIN_DIR/$t" -merge=1 -max_len=8192 "$ROOT/fuzz/corpus/$t" "$dir/new" >"$dir/merge.log" 2>&1 \
      || result="merge failed (see $dir/merge.log)"
  fi
  corpus=$(find "$ROOT/fuzz/corpus/$t" -type f | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$seconds" "$cpu" "$execs" "${cov:-?}" \
    "$corpus" "$result" >"$dir/summary"
}

if [[ $CPU_BUDGET -gt 0 ]]; then
  log "fuzzing each target until it used ${CPU_BUDGET} CPU seconds, $JOBS at a time; logs in $RUN_DIR"
else
  log "fuzzing each target for ${TIME}s, $JOBS at a time; logs in $RUN_DIR"
fi
running=0
for t in "${TARGETS[@]}"; do
  fuzz_one "$t" &
  running=$((running + 1))
  if [[ $running -ge $JOBS ]]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=0
{
  printf '%-30s %8s %8s %14s %8s %8s  %s\n' target seconds cpu_s execs cov corpus result
  for t in "${TARGETS[@]}"; do
    if [[ ! -f "$RUN_DIR/$t/summary" ]]; then
      printf '%-30s %8s %8s %14s %8s %8s  %s\n' "$t" - - - - - "did not run (see $RUN_DIR/$t/log)"
      failed=1
      continue
    fi
    IFS=$'\t' read -r name seconds cpu execs cov corpus result <"$RUN_DIR/$t/summary"
    printf '%-30s %8s %8s %14s %8s %8s  %s\n' "$name" "$seconds" "$cpu" "$execs" "$cov" "$corpus" "$result"
    if [[ -n "$LEDGER" ]]; then
      # One row per run: when, the commit fuzzed, target, wall s, CPU s, executions, result.
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
        "$(git -C "$ROOT" rev-parse --short=8 HEAD 2>/dev/null || echo '?')" "$name" "$seconds" \
        "$cpu" "$execs" "$result" >>"$LEDGER"
    fi
    [[ "$result" == ok ]] || failed=1
  done
} | tee "$RUN_DIR/summary.txt"
grep -q -v -E ' ok$|^target ' "$RUN_DIR/summary.txt" && failed=1
if [[ $failed -ne 0 ]]; then
  for t in "${TARGETS[@]}"; do
    if ! grep -q ' ok$' <(grep "^$t " "$RUN_DIR/summary.txt"); then
      log "$t: last lines of $RUN_DIR/$t/log:"
      tail -30 "$RUN_DIR/$t/log" >&2 || true
    fi
  done
  die "a fuzz target failed; the crashing inputs are in $RUN_DIR"
fi
log "every target ran without a crash"
