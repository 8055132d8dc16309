#!/usr/bin/env bash
# The Python virtualenv for the interop tests, at $PORTCULLIS_CACHE/venv, with pinned client versions.
# Source it and call ensure_venv, or run it directly.

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Pinned: the interop tests assert client behaviour (SASL versions, error paths) of these exact releases.
# pytest-xdist runs the suite's files on parallel workers (scripts/test.sh; tests/interop/conftest.py).
# pytest stays on 8.4: xdist 3.8's loadgroup marks a test's group in `item._nodeid`, which pytest 9
# no longer reads, so under pytest 9.2 every test was scheduled alone and the groups meant nothing
# (conftest.py refuses such a run rather than letting it flake).
PY_REQUIREMENTS=(confluent-kafka==2.16.1 kafka-python==2.3.3 pytest==8.4.2 pytest-xdist==3.8.0)

venv_is_ready() {
  [[ -x "$PORTCULLIS_VENV/bin/python" ]] || return 1
  "$PORTCULLIS_VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {"confluent-kafka": "2.16.1", "kafka-python": "2.3.3", "pytest": "8.4.2", "pytest-xdist": "3.8.0"}
for name, version in want.items():
    if m.version(name) != version:
        sys.exit(1)
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
