#!/usr/bin/env bash
# A real OpenID provider on loopback for the OAUTHBEARER tests (tests/oidc/provider.mjs: the npm
# package oidc-provider), and the Node packages the tests run (kafkajs). Source it, then:
#
#   ensure_oidc_deps        npm ci of tests/oidc into $PORTCULLIS_CACHE/node/oidc-<lock hash>
#   ensure_kafkajs          npm ci of tests/interop/kafkajs into $PORTCULLIS_CACHE/node/kafkajs-<lock hash>;
#                           exports KAFKAJS_NODE_PATH (a node_modules dir for NODE_PATH)
#   oidc_start RUN_DIR      starts the provider on two free loopback ports, waits until its discovery
#                           document and admin API answer, and exports the variables below
#   oidc_stop               SIGTERM (SIGKILL after a grace period)
#   oidc_env_file FILE      writes the exported variables as a sourceable file (for a second shell)
#
# After oidc_start these are exported:
#   OIDC_ISSUER            http://127.0.0.1:<port>  (the `iss` of every token)
#   OIDC_DISCOVERY_URL     $OIDC_ISSUER/.well-known/openid-configuration
#   OIDC_JWKS_URL          $OIDC_ISSUER/jwks  (the key set; counted by the admin API)
#   OIDC_KAFKA_JWKS_URL    $OIDC_ISSUER/kafka/jwks: the same key set, counted apart, for Kafka's own
#                          OAUTHBEARER listener, so Kafka's refreshes never disturb a test's count
#   OIDC_TOKEN_URL         $OIDC_ISSUER/token  (client credentials)
#   OIDC_INTROSPECTION_URL $OIDC_ISSUER/token/introspection  (RFC 7662)
#   OIDC_ADMIN_URL         http://127.0.0.1:<other port>  the test API (tests/oidc/provider.mjs says what)
#   OIDC_CLIENT_ID / OIDC_CLIENT_SECRET  the main client-credentials client (groups ["testers"])
#   OIDC_AUDIENCE          the `aud` of access tokens (kafka)
#   OIDC_TOKEN_TTL_SECONDS the access tokens' lifetime (default 12 s: short enough that every
#                          long-running client re-authenticates several times a minute)
#   OIDC_PID, OIDC_LOG
# The clients and their secrets are test-only values of a provider bound to loopback for one run.
#
# Nothing is downloaded when the cache holds the lock file's install already: the cache key is the
# SHA-256 of the lock file (package-lock.json pins every version and integrity hash).

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

: "${OIDC_TOKEN_TTL_SECONDS:=12}"
: "${OIDC_AUDIENCE:=kafka}"
: "${OIDC_CLIENT_ID:=portcullis-test-client}"
: "${OIDC_CLIENT_SECRET:=portcullis-test-client-secret}"
: "${OIDC_START_TIMEOUT:=30}"
export OIDC_TOKEN_TTL_SECONDS OIDC_AUDIENCE OIDC_CLIENT_ID OIDC_CLIENT_SECRET

# node_ci SRC_DIR NAME: installs SRC_DIR's package-lock.json with `npm ci` into
# $PORTCULLIS_CACHE/node/NAME-<hash> (once per lock file) and prints that directory.
node_ci() {
  local src=$1 name=$2 hash dir tmp
  require_tools node npm
  [[ -f $src/package-lock.json ]] || die "$src/package-lock.json is missing"
  hash=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
  dir="$PORTCULLIS_CACHE/node/$name-$hash"
  if [[ ! -f $dir/.complete ]]; then
    log "npm ci for $src into $dir"
    tmp="$dir.tmp$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    cp "$src/package.json" "$src/package-lock.json" "$tmp/"
    # --ignore-scripts: none of these packages needs an install script, and none may run one.
    if ! (cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2); then
      rm -rf "$tmp"
      die "npm ci failed for $src"
    fi
    touch "$tmp/.complete"
    rm -rf "$dir"
    mv "$tmp" "$dir"
  fi
  printf '%s\n' "$dir"
}

ensure_oidc_deps() {
  local major
  require_tools node npm
  # oidc-provider 9 needs a Node with require(esm) and the WebCrypto it uses (20.19+).
  major=$(node -p 'process.versions.node.split(".").map(Number).join(" ")')
  read -r -a major <<<"$major"
  if ((major[0] < 20 || (major[0] == 20 && major[1] < 19))); then
    die "node $(node --version) is too old for oidc-provider 9 (need 20.19 or later)"
  fi
  OIDC_DEPS_DIR=$(node_ci "$REPO_ROOT/tests/oidc" oidc) || return 1
  export OIDC_DEPS_DIR
}

ensure_kafkajs() {
  local dir
  dir=$(node_ci "$REPO_ROOT/tests/interop/kafkajs" kafkajs) || return 1
  export KAFKAJS_NODE_PATH="$dir/node_modules"
}

oidc_start() {
  local run_dir=${1:?oidc_start RUN_DIR} ports port admin_port
  ensure_oidc_deps || return 1
  mkdir -p "$run_dir"
  run_dir="$(cd "$run_dir" && pwd)"
  # The script runs from the run directory, beside a link to the cached node_modules: Node resolves
  # an ES module's imports from the importing file's directory, and the clone stays free of them.
  cp "$REPO_ROOT/tests/oidc/provider.mjs" "$run_dir/provider.mjs"
  ln -sfn "$OIDC_DEPS_DIR/node_modules" "$run_dir/node_modules"
  mapfile -t ports < <(free_ports 2)
  ((${#ports[@]} == 2)) || die "could not pick free ports for the OpenID provider"
  port=${ports[0]} admin_port=${ports[1]}
  export OIDC_ISSUER="http://127.0.0.1:$port"
  export OIDC_DISCOVERY_URL="$OIDC_ISSUER/.well-known/openid-configuration"
  export OIDC_JWKS_URL="$OIDC_ISSUER/jwks"
  export OIDC_KAFKA_JWKS_URL="$OIDC_ISSUER/kafka/jwks"
  export OIDC_TOKEN_URL="$OIDC_ISSUER/token"
  export OIDC_INTROSPECTION_URL="$OIDC_ISSUER/token/introspection"
  export OIDC_ADMIN_URL="http://127.0.0.1:$admin_port"
  export OIDC_LOG="$run_dir/oidc-provider.log"
  log "starting the OpenID provider (oidc-provider): issuer $OIDC_ISSUER, admin $OIDC_ADMIN_URL"
  OIDC_PORT=$port OIDC_ADMIN_PORT=$admin_port node "$run_dir/provider.mjs" >>"$OIDC_LOG" 2>&1 &
  OIDC_PID=$!
  export OIDC_PID
  local deadline=$((SECONDS + OIDC_START_TIMEOUT))
  # Ready = the discovery document names our token endpoint and the admin API answers.
  until python3 - "$OIDC_DISCOVERY_URL" "$OIDC_TOKEN_URL" "$OIDC_ADMIN_URL/health" <<'PY' 2>/dev/null; do
import json, sys, urllib.request
doc = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))
assert doc["token_endpoint"] == sys.argv[2], doc
urllib.request.urlopen(sys.argv[3], timeout=2).read()
PY
    if ((SECONDS >= deadline)) || ! kill -0 "$OIDC_PID" 2>/dev/null; then
      log "---- $OIDC_LOG ----"
      tail -n 60 "$OIDC_LOG" >&2 || true
      oidc_stop
      die "the OpenID provider did not start"
    fi
    sleep 0.2
  done
  log "OpenID provider ready (pid $OIDC_PID, log $OIDC_LOG)"
}

oidc_stop() {
  if [[ -n "${OIDC_PID:-}" ]]; then
    stop_pid "$OIDC_PID" 10
    OIDC_PID=
  fi
}

oidc_env_file() {
  local f=${1:?oidc_env_file FILE} v
  {
    for v in OIDC_ISSUER OIDC_DISCOVERY_URL OIDC_JWKS_URL OIDC_KAFKA_JWKS_URL OIDC_TOKEN_URL OIDC_INTROSPECTION_URL \
      OIDC_ADMIN_URL OIDC_CLIENT_ID OIDC_CLIENT_SECRET OIDC_AUDIENCE OIDC_TOKEN_TTL_SECONDS OIDC_PID OIDC_LOG; do
      printf 'export %s=%q\n' "$v" "${!v}"
    done
    [[ -n ${KAFKAJS_NODE_PATH:-} ]] && printf 'export KAFKAJS_NODE_PATH=%q\n' "$KAFKAJS_NODE_PATH"
  } >"$f"
}
