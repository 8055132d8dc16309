#!/usr/bin/env bash
# Shared helpers for the Portcullis test scripts. Source it; do not run it.
# Everything downloaded or built for the tests lives under $PORTCULLIS_CACHE, outside the clone, so CI
# can cache it between runs.

set -euo pipefail

: "${PORTCULLIS_CACHE:=$HOME/.cache/portcullis}"
export PORTCULLIS_CACHE
export KAFKA_VERSION=4.4.0
export KAFKA_LIB="$PORTCULLIS_CACHE/kafka-$KAFKA_VERSION/lib"
export PORTCULLIS_VENV="$PORTCULLIS_CACHE/venv"

# The repository root (scripts/lib/../..).
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export REPO_ROOT

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Prints N distinct free loopback TCP ports, one per line, from below the kernel's ephemeral range
# (scripts/lib/free_ports.py says why). Another process can still bind one before we do, which is
# why callers start their servers right after asking.
free_ports() {
  python3 "$REPO_ROOT/scripts/lib/free_ports.py" "${1:-1}"
}

# wait_for_port HOST PORT TIMEOUT_SECONDS [PID]: waits until a TCP connect succeeds. Fails early if
# PID (the server we started) has died.
wait_for_port() {
  local host=$1 port=$2 timeout=$3 pid=${4:-}
  local deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      log "process $pid exited while waiting for $host:$port"
      return 1
    fi
    if python3 -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()' \
      "$host" "$port" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  log "timed out after ${timeout}s waiting for $host:$port"
  return 1
}

# stop_pid PID [GRACE_SECONDS]: SIGTERM, wait up to GRACE seconds, then SIGKILL. Only ever used on
# processes these scripts started.
stop_pid() {
  local pid=$1 grace=${2:-15}
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "process $pid did not stop after ${grace}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# Installs kcat from Debian when it is missing.
ensure_kcat() {
  command -v kcat >/dev/null 2>&1 && return 0
  log "kcat missing: installing it with apt-get"
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq kcat >/dev/null
  command -v kcat >/dev/null 2>&1 || die "kcat is still missing after apt-get install"
}

# Checks that the tools the scripts cannot install themselves are present.
require_tools() {
  local missing=()
  for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  ((${#missing[@]} == 0)) || die "missing tools: ${missing[*]} (install them first)"
}

# The cargo target directory the build uses.
cargo_target_dir() {
  if [[ -n "${CARGO_TARGET_DIR:-}" ]]; then
    # Relative CARGO_TARGET_DIR is relative to the cargo invocation's directory: the repo root here.
    case "$CARGO_TARGET_DIR" in
      /*) printf '%s\n' "$CARGO_TARGET_DIR" ;;
      *) printf '%s\n' "$REPO_ROOT/$CARGO_TARGET_DIR" ;;
    esac
  else
    printf '%s\n' "$REPO_ROOT/target"
  fi
}
