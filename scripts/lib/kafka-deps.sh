#!/usr/bin/env bash
# Resolves Apache Kafka's broker, tools and client jars from Maven Central into
# $PORTCULLIS_CACHE/kafka-4.4.0/lib (outside the clone; CI caches it together with ~/.m2).
# Source it and call ensure_kafka_deps, or run it directly.

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ensure_kafka_deps() {
  # The marker holds the pom's hash: editing the pom (a version bump, a new jar) re-resolves.
  local marker="$KAFKA_LIB/.pom-sha256" want
  want=$(sha256sum "$REPO_ROOT/scripts/kafka/pom.xml" | cut -d' ' -f1)
  if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
    return 0
  fi
  require_tools mvn java
  log "resolving Kafka $KAFKA_VERSION jars with Maven into $KAFKA_LIB"
  local tmp="$KAFKA_LIB.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # Explicit checks, not set -e: callers may run this inside `if`/`||`, where set -e is off.
  if ! mvn -q -B -Dstyle.color=never -f "$REPO_ROOT/scripts/kafka/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$tmp" -Dkafka.version="$KAFKA_VERSION" >&2; then
    rm -rf "$tmp"
    die "mvn dependency:copy-dependencies failed"
  fi
  ls "$tmp"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null || die "Maven produced no kafka_2.13 jar"
  # Swap in whole so an interrupted download never looks complete.
  rm -rf "$KAFKA_LIB" && mv "$tmp" "$KAFKA_LIB" || die "could not move the jars into $KAFKA_LIB"
  printf '%s\n' "$want" >"$marker"
  log "Kafka jars ready: $(find "$KAFKA_LIB" -name '*.jar' | wc -l) jars"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  ensure_kafka_deps
fi
