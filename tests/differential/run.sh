#!/usr/bin/env bash
# Runs the differential authorization table (scenarios.yaml) with java/Differential.java.
#
# Usage: tests/differential/run.sh [--record] [--portcullis HOST:PORT@USERS.properties] [--only ID,...]
#                                  [--report FILE]
#        tests/differential/run.sh --classes
#   (no option)    runs the table against Kafka's SASL listener and compares with expected.yaml
#   --record       runs it against Kafka and rewrites expected.yaml with Kafka's outcomes
#   --portcullis   also runs it through Portcullis (ACLs applied through Portcullis' own ACL APIs)
#                  and requires the same outcome as Kafka for every scenario
#   --classes      only compiles java/*.java (cached) and prints the classes directory
# Kafka: uses the one described by KAFKA_SASL_BOOTSTRAP/KAFKA_LIB/KAFKA_ADMIN_*/KAFKA_ACL_USERS (as
# exported by scripts/lib/kafka.sh, e.g. inside scripts/test.sh); when KAFKA_SASL_BOOTSTRAP is unset it
# starts its own Kafka for the run and stops it afterwards.
# Exit status: 0 when all outcomes are equal, 1 on a mismatch, 2 on bad usage.

set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../../scripts/lib/common.sh
source "$HERE/../../scripts/lib/common.sh"

record=0
classes_only=0
args=()
while (($#)); do
  case "$1" in
    --record) record=1 ;;
    --classes) classes_only=1 ;;
    --portcullis) args+=(--target "portcullis=${2:?--portcullis needs HOST:PORT@USERS}"); shift ;;
    --only) args+=(--only "${2:?}"); shift ;;
    --report) args+=(--report "${2:?}"); shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

require_tools java javac
work=$(mktemp -d "${TMPDIR:-/tmp}/differential.XXXXXX")
own_kafka=0
cleanup() {
  if ((own_kafka)); then kafka_stop; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Compile once per source and kafka-clients version (cached like tests/interop/java).
: "${KAFKA_LIB:?}"
hash=$( (cat "$HERE"/java/*.java; ls "$KAFKA_LIB" | grep '^kafka-clients-') | sha256sum | cut -c1-16)
classes="$PORTCULLIS_CACHE/differential-java/$hash"
if [[ ! -f "$classes/.complete" ]]; then
  rm -rf "$classes" "$classes.tmp.$$" # a directory without the mark is a killed run's leftover
  mkdir -p "$classes.tmp.$$"
  javac -nowarn -cp "$KAFKA_LIB/*" -d "$classes.tmp.$$" "$HERE"/java/*.java
  touch "$classes.tmp.$$/.complete"
  # One rename makes the complete directory appear. A parallel test worker that compiled the same
  # sources first wins (rename onto its non-empty directory fails) and its classes are kept.
  mv -T "$classes.tmp.$$" "$classes" 2>/dev/null || rm -rf "$classes.tmp.$$"
fi

if ((classes_only)); then
  printf '%s\n' "$classes"
  exit 0
fi

if [[ -z "${KAFKA_SASL_BOOTSTRAP:-}" ]]; then
  # shellcheck source=../../scripts/lib/kafka-deps.sh
  source "$HERE/../../scripts/lib/kafka-deps.sh"
  # shellcheck source=../../scripts/lib/kafka.sh
  source "$HERE/../../scripts/lib/kafka.sh"
  ensure_kafka_deps
  own_kafka=1
  kafka_start "$work/kafka"
fi
: "${KAFKA_ADMIN_USER:?}" "${KAFKA_ADMIN_PASSWORD:?}" "${KAFKA_ACL_USERS:?}"

# Kafka's users and passwords, in the runner's format (user=password).
users="$work/kafka-users.properties"
{
  printf '%s=%s\n' "$KAFKA_ADMIN_USER" "$KAFKA_ADMIN_PASSWORD"
  for u in $KAFKA_ACL_USERS; do printf '%s=%s\n' "${u%%:*}" "${u#*:}"; done
} >"$users"

((record)) && args+=(--record)
java -Xmx384m -XX:+UseSerialGC -Dlog4j2.configurationFile="$HERE/log4j2.properties" \
  -cp "$classes:$KAFKA_LIB/*" Differential --table "$HERE/scenarios.yaml" --expected "$HERE/expected.yaml" \
  --target "kafka=$KAFKA_SASL_BOOTSTRAP@$users" "${args[@]}"
