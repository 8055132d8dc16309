#!/usr/bin/env bash
# Builds the Jaeger all-in-one binary (Jaeger v2, `cmd/jaeger`, Go module
# github.com/jaegertracing/jaeger v1.76.0) once and caches it outside the repository.
# Prints the binary's path. `go install pkg@version` refuses the module (its go.mod has replace
# directives), so it is added as a tool of a throwaway module in the cache and built from there.
set -euo pipefail

JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
cache="${PORTCULLIS_CACHE:-$HOME/.cache/portcullis}/jaeger-$JAEGER_VERSION"
bin="$cache/bin/jaeger"

if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi
command -v go >/dev/null || { echo "jaeger.sh: go is not installed" >&2; exit 1; }
mkdir -p "$cache/module" "$cache/bin"
cd "$cache/module"
[[ -f go.mod ]] || go mod init portcullis.local/jaeger-build >/dev/null 2>&1
echo "jaeger.sh: building Jaeger $JAEGER_VERSION (first run only; several minutes)" >&2
GOFLAGS=-buildvcs=false go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION" >&2
GOFLAGS=-buildvcs=false go build -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger >&2
mv "$bin.tmp" "$bin"
echo "$bin"
