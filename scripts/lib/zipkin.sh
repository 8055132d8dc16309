#!/usr/bin/env bash
# Fetches the Zipkin server (Maven Central io.zipkin:zipkin-server, the `exec` jar: a Spring Boot
# fat jar with the Zipkin UI, zipkin-lens, embedded) once with mvn and caches it outside the
# repository. Prints the jar's path. Run it with `java -jar JAR`; scripts/trace-screenshot.sh binds
# it to loopback on a free port (--armeria.ports[0].ip / .port) with in-memory storage.
set -euo pipefail

ZIPKIN_VERSION="${ZIPKIN_VERSION:-3.5.1}"
cache="${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}/zipkin-$ZIPKIN_VERSION"
jar="$cache/zipkin-server-$ZIPKIN_VERSION-exec.jar"

if [[ -s "$jar" ]]; then
    echo "$jar"
    exit 0
fi
command -v mvn >/dev/null || { echo "zipkin.sh: mvn is not installed" >&2; exit 1; }
mkdir -p "$cache"
echo "zipkin.sh: fetching io.zipkin:zipkin-server:$ZIPKIN_VERSION:jar:exec (first run only)" >&2
# dependency:copy needs no project; run it from the cache so no pom.xml around is picked up.
(cd "$cache" && mvn -q -B dependency:copy "-Dartifact=io.zipkin:zipkin-server:$ZIPKIN_VERSION:jar:exec" \
    "-DoutputDirectory=$cache" >&2)
[[ -s "$jar" ]] || { echo "zipkin.sh: no $jar after mvn dependency:copy" >&2; exit 1; }
echo "$jar"
