#!/usr/bin/env bash
# One OAUTHBEARER token validation with a cached key: Portcullis' `jwks` validator vs Kafka 4.4's
# own (OAuthBearerValidatorCallbackHandler -> BrokerJwtValidator, jose4j), on the same key set and
# token files, same machine, same run, interleaved.
#
#   scripts/bench-oauth.sh                 # 3 rounds
#   ROUNDS=5 scripts/bench-oauth.sh
#
# 1. builds the criterion bench (plugins/oauthbearer/benches/validate.rs) and the JMH harness
#    (benches/oauth-validator-jmh);
# 2. writes one key set (RSA-2048, P-256, Ed25519) and one token per algorithm (RS256, ES256,
#    EdDSA; Keycloak-sized claims, exp years ahead) with the harness' MakeTokens into $OUT/data:
#    both sides read these bytes;
# 3. ROUNDS times, Portcullis then Kafka (A B A B ...):
#    A: criterion group `shared/` (validate, ring's bare verify of the same signature, the
#       unsecured validator on the same payload), CRITERION_WARMUP s warm-up + CRITERION_TIME s;
#    B: JMH (1 fork per case, 3 warm-up + 5 measured iterations of 1 s, sample mode):
#       the callback handler with a file: JWKS URL (as a broker is configured), BrokerJwtValidator
#       alone with it, and BrokerJwtValidator with the key set in memory (no stat per lookup);
#    and `openssl speed` verify rates as a reference for each algorithm;
# 4. prints the table: per token kind the median over rounds of each round's median (µs per
#    validation), its range, and the ratio Kafka / Portcullis (median of the per-round ratios).
#    Everything, with the machine's load (uptime, vmstat), is kept in $OUT.
#
# Environment: ROUNDS (3), CRITERION_WARMUP (3), CRITERION_TIME (5), OPENSSL_SECONDS (2; 0 skips
# openssl speed), PORTCULLIS_OAUTH_BENCH_OUT (default $CARGO_TARGET_DIR/bench-oauth/<UTC time>).

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/common.sh
source scripts/lib/common.sh

: "${ROUNDS:=3}"
: "${CRITERION_WARMUP:=3}"
: "${CRITERION_TIME:=5}"
: "${OPENSSL_SECONDS:=2}"
ISSUER="https://idp.example/realms/kafka"
AUDIENCE="kafka"
KINDS="RS256,ES256,EdDSA"

[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer (got $ROUNDS)"
require_tools cargo mvn java python3 git
if ((OPENSSL_SECONDS > 0)); then require_tools openssl; fi

TARGET="$(cargo_target_dir)"
OUT="${PORTCULLIS_OAUTH_BENCH_OUT:-$TARGET/bench-oauth/$(date -u +%Y%m%dT%H%M%SZ)}"
JMH_DIR="$REPO_ROOT/benches/oauth-validator-jmh"
JAR="$JMH_DIR/target/oauth-validator-jmh.jar"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
DATA="$OUT/data"

# load_snapshot LABEL: the 1-minute load and 4 one-second vmstat samples (the first vmstat line,
# the average since boot, is left out), appended to $OUT/load.txt.
load_snapshot() {
  {
    printf '== %s, %s\n' "$1" "$(date -u +%H:%M:%SZ)"
    uptime
    vmstat 1 5 | awk 'NR == 2 { print } NR > 3 { print }'
  } >>"$OUT/load.txt"
}

log "building the criterion bench (release) and the JMH harness"
BENCH_BIN=$(cargo bench -q -p portcullis-plugin-oauthbearer --bench validate --no-run --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "validate":
        print(m["executable"])')
[[ -x "$BENCH_BIN" ]] || die "no executable for the validate bench"
(cd "$JMH_DIR" && mvn -q -B -Dstyle.color=never package -DskipTests >&2) || die "mvn package failed in $JMH_DIR"

log "writing the key set and tokens into $DATA"
rm -rf "$DATA"
java -cp "$JAR" dev.portcullis.bench.MakeTokens "$DATA" "$ISSUER" "$AUDIENCE" 2>/dev/null
JWKS_URL="file://$DATA/jwks.json"

{
  printf 'commit:  %s' "$(git rev-parse --short HEAD)"
  if [[ -n "$(git status --porcelain -- plugins/oauthbearer benches/oauth-validator-jmh scripts/bench-oauth.sh)" ]]; then
    printf ' (with local changes to the bench files)'
  fi
  printf '\nnproc:   %s\ncpu:     %s\nrustc:   %s\njava:    %s\nopenssl: %s\n' "$(nproc)" \
    "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" "$(rustc --version)" \
    "$(java -version 2>&1 | head -n 1)" "$(openssl version 2>/dev/null || echo -)"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2
: >"$OUT/load.txt"
load_snapshot "before the rounds"

for ((r = 1; r <= ROUNDS; r++)); do
  dir="$OUT/round-$r"
  mkdir -p "$dir"
  log "round $r/$ROUNDS: Portcullis (criterion), load $(cut -d' ' -f1-3 /proc/loadavg)"
  if ! PORTCULLIS_OAUTH_BENCH_DIR="$DATA" PORTCULLIS_OAUTH_BENCH_ISSUER="$ISSUER" \
    PORTCULLIS_OAUTH_BENCH_AUDIENCE="$AUDIENCE" CRITERION_HOME="$dir/criterion" \
    "$BENCH_BIN" --bench --noplot --warm-up-time "$CRITERION_WARMUP" \
    --measurement-time "$CRITERION_TIME" '^shared/' >"$dir/criterion.txt" 2>&1; then
    cat "$dir/criterion.txt" >&2
    die "the criterion bench failed in round $r"
  fi
  # A long name puts criterion's "time:" on the next line.
  awk '/^shared\// { name = $0; sub(/ +time:.*/, "", name) } /time:/ { t = $0; sub(/.*time: +/, "", t); print name ": " t }' \
    "$dir/criterion.txt" >&2

  log "round $r/$ROUNDS: Kafka (JMH), load $(cut -d' ' -f1-3 /proc/loadavg)"
  if ! java -jar "$JAR" KafkaValidatorBench -foe true -p dir="$DATA" -p kind="$KINDS" \
    -p issuer="$ISSUER" -p audience="$AUDIENCE" \
    -jvmArgsAppend "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$JWKS_URL" \
    -rf json -rff "$dir/jmh.json" >"$dir/jmh.txt" 2>&1; then
    cat "$dir/jmh.txt" >&2
    die "the JMH harness failed in round $r"
  fi
  grep -E "^KafkaValidatorBench\.[A-Za-z]+:p0\.50 " "$dir/jmh.txt" | sed 's/  */ /g' >&2 || true

  if ((OPENSSL_SECONDS > 0)); then
    openssl speed -mr -seconds "$OPENSSL_SECONDS" rsa2048 ecdsap256 ed25519 2>/dev/null \
      | grep -E '^\+F[246]:' >"$dir/openssl.txt" || die "openssl speed failed in round $r"
  fi
done
load_snapshot "after the rounds"

log "medians (µs per validation)"
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/results.md"
import glob, json, os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
kinds = ["RS256", "ES256", "EdDSA"]
jmh_name = "dev.portcullis.bench.KafkaValidatorBench."
# column key -> per-round {kind: ns}
cols = {k: [] for k in ["validate", "ring", "unsecured", "callbackHandler", "validatorFile",
                        "validatorInMemory", "openssl"]}
for r in range(1, rounds + 1):
    d = os.path.join(out, f"round-{r}")
    got = {k: {} for k in cols}
    for bj in glob.glob(os.path.join(d, "criterion", "shared", "*", "new", "benchmark.json")):
        b = json.load(open(bj))
        est = json.load(open(os.path.join(os.path.dirname(bj), "estimates.json")))
        f = b["function_id"]
        median = est["median"]["point_estimate"]
        for kind in kinds:
            if f == f"validate {kind}":
                got["validate"][kind] = median
            elif f == f"ring verify {kind} (bare)":
                got["ring"][kind] = median
            elif f == f"unsecured {kind} payload":
                got["unsecured"][kind] = median
    for res in json.load(open(os.path.join(d, "jmh.json"))):
        method = res["benchmark"].removeprefix(jmh_name)
        got[method][res["params"]["kind"]] = res["primaryMetric"]["scorePercentiles"]["50.0"]
    path = os.path.join(d, "openssl.txt")
    if os.path.exists(path):
        for line in open(path):
            f = line.strip().split(":")
            verify_per_s = float(f[-1])
            kind = {"+F2": "RS256", "+F4": "ES256", "+F6": "EdDSA"}[f[0]]
            got["openssl"][kind] = 1e9 / verify_per_s
    for k in cols:
        cols[k].append(got[k])

missing = [(k, r + 1, kind) for k in cols if k != "openssl" or cols[k][0]
           for r in range(rounds) for kind in kinds if kind not in cols[k][r]]
if missing:
    sys.exit(f"missing results: {missing}")

def us(ns):
    return f"{ns / 1e3:.1f}"

def cell(k, kind):
    vals = [cols[k][r][kind] for r in range(rounds) if kind in cols[k][r]]
    if not vals:
        return "-"
    m = statistics.median(vals)
    return f"{us(m)} ({us(min(vals))}–{us(max(vals))})" if len(vals) > 1 else us(m)

def ratio(k, kind):
    vals = [cols[k][r][kind] / cols["validate"][r][kind] for r in range(rounds)]
    return f"{statistics.median(vals):.1f}× ({min(vals):.1f}–{max(vals):.1f})"

header = ["token", "Portcullis validate", "ring verify alone", "Kafka callback handler (file: JWKS)",
          "Kafka BrokerJwtValidator (file: JWKS)", "Kafka BrokerJwtValidator (keys in memory)",
          "Kafka handler / Portcullis", "Kafka in-memory / Portcullis"]
rows = [header]
for kind in kinds:
    rows.append([kind, cell("validate", kind), cell("ring", kind), cell("callbackHandler", kind),
                 cell("validatorFile", kind), cell("validatorInMemory", kind),
                 ratio("callbackHandler", kind), ratio("validatorInMemory", kind)])
widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
print(f"Median of {rounds} per-round medians, µs per validation (min–max over the rounds):\n")
for i, r in enumerate(rows):
    print("| " + " | ".join(x.ljust(w) for x, w in zip(r, widths)) + " |")
    if i == 0:
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")

print("\nAll but the signature (Portcullis' unsecured validator on the same payload) and "
      "OpenSSL's verify (openssl speed, reference), µs:\n")
print("| token | unsecured validator | openssl speed verify |")
print("|---|---:|---:|")
for kind in kinds:
    print(f"| {kind} | {cell('unsecured', kind)} | {cell('openssl', kind)} |")

print("\nPer round (µs: Portcullis validate / ring alone / Kafka handler / Kafka in memory):\n")
for r in range(rounds):
    parts = [f"{kind} {us(cols['validate'][r][kind])} / {us(cols['ring'][r][kind])} / "
             f"{us(cols['callbackHandler'][r][kind])} / {us(cols['validatorInMemory'][r][kind])}"
             for kind in kinds]
    print(f"- round {r + 1}: " + "; ".join(parts))
PY

log "load during the run ($OUT/load.txt):"
cat "$OUT/load.txt" >&2
log "results: $OUT/results.md"
