#!/usr/bin/env bash
# The Python virtualenv for the interop tests, at $PORTCULLIS_CACHE/venv, with pinned client versions.
# Source it and call ensure_venv, or run it directly.

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Pinned: the interop tests assert client behaviour (SASL versions, error paths) of these exact releases.
PY_REQUIREMENTS=(confluent-kafka==2.16.1 kafka-python==2.3.3 pytest)

venv_is_ready() {
  [[ -x "$PORTCULLIS_VENV/bin/python" ]] || return 1
  "$PORTCULLIS_VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {"confluent-kafka": "2.16.1", "kafka-python": "2.3.3"}
for name, version in want.items():
    if m.version(name) != version:
        sys.exit(1)
m.version("pytest")
PY
}

ensure_venv() {
  venv_is_ready && return 0
  require_tools python3
  log "creating the Python venv at $PORTCULLIS_VENV"
  # Explicit checks, not set -e: callers may run this inside `if`/`||`, where set -e is off.
  python3 -m venv "$PORTCULLIS_VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$PORTCULLIS_VENV/bin/python" -m pip install -q "${PY_REQUIREMENTS[@]}" >&2 || die "pip install failed"
  venv_is_ready || die "the venv at $PORTCULLIS_VENV lacks the pinned client versions after install"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  ensure_venv
fi
