#!/usr/bin/env bash
# Portcullis `acl` authorizer vs Kafka 4.4 StandardAuthorizer, same ACL corpus files, same run.
#
#   scripts/bench-authorizer.sh                 # every corpus
#   CORPORA=realistic,kafka-10000-10 scripts/bench-authorizer.sh
#
# 1. writes the corpora (plugins/acl/examples/gen_corpus.rs) into target/acl-corpus if missing;
# 2. checks that both authorizers give the same decision for every case of every corpus;
# 3. runs the criterion bench (plugins/acl/benches/authorize.rs) and the JMH harness
#    (benches/authorizer-jmh, 1 fork, 2 warmup + 3 measurement iterations of 1 s, sample mode);
# 4. prints a table of medians (ns/op) and the ratio Kafka / Portcullis.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# Honour CARGO_TARGET_DIR (relative to the repository root) for the binaries and criterion's
# output; the corpora and the comparison stay under the repository's target/.
case "${CARGO_TARGET_DIR:-}" in
  "") TARGET="$ROOT/target" ;;
  /*) TARGET="$CARGO_TARGET_DIR" ;;
  *) TARGET="$ROOT/$CARGO_TARGET_DIR" ;;
esac
DIR="${PORTCULLIS_ACL_CORPUS:-$ROOT/target/acl-corpus}"
OUT="$ROOT/target/bench-authorizer"
JMH_DIR="$ROOT/benches/authorizer-jmh"
JAR="$JMH_DIR/target/authorizer-jmh.jar"
mkdir -p "$OUT"

ALL="realistic,kafka-10000-10,kafka-10000-50,kafka-50000-10,kafka-50000-50,kafka-200000-10,kafka-200000-50"
CORPORA="${CORPORA:-$ALL}"

echo "== building (release) and packaging the JMH harness"
cargo build --release -p portcullis-plugin-acl --examples >/dev/null
(cd "$JMH_DIR" && mvn -q -B package -DskipTests)

if [ ! -f "$DIR/kafka-200000-50.acl" ] || [ ! -f "$DIR/realistic.acl" ]; then
  echo "== writing corpora into $DIR"
  "$TARGET/release/examples/gen_corpus" "$DIR" >/dev/null
fi

echo "== decision cross-check (every case, both authorizers)"
IFS=',' read -r -a LIST <<< "$CORPORA"
for c in "${LIST[@]}"; do
  "$TARGET/release/examples/decide" "$DIR/$c.acl" > "$OUT/$c.portcullis.decisions"
  java -Xmx10g -cp "$JAR" dev.portcullis.bench.Decide "$DIR/$c.acl" 2>/dev/null > "$OUT/$c.kafka.decisions"
  if diff -u "$OUT/$c.kafka.decisions" "$OUT/$c.portcullis.decisions"; then
    echo "$c: $(wc -l < "$OUT/$c.kafka.decisions") cases, same decisions"
  else
    echo "$c: DECISIONS DIFFER" >&2
    exit 1
  fi
done

echo "== Portcullis (criterion)"
PORTCULLIS_ACL_CORPUS="$DIR" PORTCULLIS_ACL_CORPORA="$CORPORA" \
  cargo bench -q -p portcullis-plugin-acl --bench authorize -- --noplot 2>&1 | grep -E "time:|ACLs" || true

echo "== Kafka StandardAuthorizer (JMH)"
rm -f "$OUT"/jmh-*.json
for c in "${LIST[@]}"; do
  cases=$(grep -E '^(authorize|by_resource_type)	bench_' "$DIR/$c.acl" | cut -f2 | paste -sd, -)
  java -jar "$JAR" StandardAuthorizerBench -p corpus="$DIR/$c.acl" -p caseName="$cases" \
    -rf json -rff "$OUT/jmh-$c.json" 2>/dev/null | grep -E "^StandardAuthorizerBench.run(:p0.50)? " || true
done

echo "== medians (ns/op)"
python3 - "$TARGET/criterion" "$OUT" "$CORPORA" <<'PY'
import json, os, sys, glob
crit, out, corpora = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
rust = {}
for bj in glob.glob(os.path.join(crit, "**", "new", "benchmark.json"), recursive=True):
    b = json.load(open(bj))
    est = json.load(open(os.path.join(os.path.dirname(bj), "estimates.json")))
    rust[(b["group_id"], b["function_id"])] = est["median"]["point_estimate"]
kafka = {}
for c in corpora:
    path = os.path.join(out, f"jmh-{c}.json")
    if not os.path.exists(path):
        continue
    for r in json.load(open(path)):
        p = r["params"]
        kafka[(c, p["caseName"])] = r["primaryMetric"]["scorePercentiles"]["50.0"]
def fmt(ns):
    if ns is None: return "-"
    if ns >= 1e6: return f"{ns/1e6:.2f} ms"
    if ns >= 1e3: return f"{ns/1e3:.2f} µs"
    return f"{ns:.1f} ns"
rows = [("corpus", "case", "Portcullis authorize()", "Portcullis decide()", "Kafka StandardAuthorizer", "Kafka / Portcullis")]
for c in corpora:
    for (corpus, case), k in sorted(kafka.items()):
        if corpus != c: continue
        if (c, case + "/authorize") in rust:
            a, d = rust[(c, case + "/authorize")], rust.get((c, case + "/decide"))
        else:
            a, d = rust.get((c, case)), None
        ratio = f"{k / a:,.0f}×" if a else "-"
        rows.append((c, case, fmt(a), fmt(d), fmt(k), ratio))
widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for i, r in enumerate(rows):
    print("| " + " | ".join(x.ljust(w) for x, w in zip(r, widths)) + " |")
    if i == 0:
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
PY
