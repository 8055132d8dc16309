#!/usr/bin/env bash
# Portcullis in five minutes: builds portcullis, starts a local Apache Kafka 4.4 and one Portcullis
# node in front of it (examples/quickstart.toml), adds a SCRAM user, then produces and consumes a few
# messages with kcat over SASL_PLAINTEXT SCRAM-SHA-512 *through Portcullis*, and prints the commands
# to do the same by hand. Everything stays up until Ctrl-C.
#
# Usage: scripts/quickstart.sh [--exit] [--oauth]
#   --exit   stop everything after the demo (the default when CI is set)
#   --oauth  also start a local OpenID provider (oidc-provider, as the tests use) and enable
#            OAUTHBEARER; a confluent-kafka client then logs in with a token it fetched from the
#            provider (client credentials) and produces and consumes through Portcullis
# Ports are chosen free at run time; nothing is written outside a temporary run directory and
# $PORTCULLIS_CACHE (default ~/.cache/portcullis: Kafka jars, Python venv).

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/common.sh
source scripts/lib/common.sh
# shellcheck source=lib/kafka-deps.sh
source scripts/lib/kafka-deps.sh
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
# shellcheck source=lib/kafka.sh
source scripts/lib/kafka.sh
# shellcheck source=lib/kcat.sh
source scripts/lib/kcat.sh

# shellcheck source=lib/oidc.sh
source scripts/lib/oidc.sh

exit_after_demo=0
oauth=0
[[ -n "${CI:-}" ]] && exit_after_demo=1
while (($#)); do
  case "$1" in
    --exit) exit_after_demo=1 ;;
    --oauth) oauth=1 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done

CONFIG=examples/quickstart.toml
USER_NAME=alice
USER_PASSWORD=quickstart-secret
TOPIC=quickstart
RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/portcullis-quickstart.XXXXXX")
PORTCULLIS_PID=
ok=0

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$PORTCULLIS_PID" ]]; then
    log "stopping Portcullis (pid $PORTCULLIS_PID)"
    stop_pid "$PORTCULLIS_PID" 15
  fi
  log "stopping Kafka"
  kafka_stop
  ((oauth)) && oidc_stop
  if ((ok)); then
    rm -rf "$RUN_DIR"
  else
    kafka_dump_log 60
    if [[ -f "$RUN_DIR/portcullis.log" ]]; then
      log "---- $RUN_DIR/portcullis.log ----"
      tail -n 60 "$RUN_DIR/portcullis.log" >&2
    fi
    log "quickstart failed; logs kept in $RUN_DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'ok=1; exit 0' INT TERM # Ctrl-C after the demo is the normal way out

log "checking tools (kcat, Kafka jars, Python venv)"
require_tools cargo java mvn python3
ensure_kcat
ensure_kafka_deps
ensure_venv
kcat_prepare_scram

log "building portcullis"
cargo build -q -p portcullis-host
BIN="$(cargo_target_dir)/debug/portcullis"
[[ -x "$BIN" ]] || die "no portcullis binary at $BIN"

if ((oauth)); then
  require_tools node npm
  ensure_oidc_deps
  oidc_start "$RUN_DIR/oidc"
  # OAUTHBEARER next to SCRAM, validated against the provider's key set (docs/security.md).
  sed 's/^sasl_mechanisms = .*/sasl_mechanisms = ["SCRAM-SHA-512", "OAUTHBEARER"]/' "$CONFIG" >"$RUN_DIR/quickstart.toml"
  cat >>"$RUN_DIR/quickstart.toml" <<EOT

[oauthbearer]
validator = "jwks"
jwks_url = "$OIDC_JWKS_URL"
expected_issuer = "$OIDC_ISSUER"
expected_audience = ["$OIDC_AUDIENCE"]
allowed_urls = ["$OIDC_ISSUER/"]
EOT
  CONFIG=$RUN_DIR/quickstart.toml
fi
kafka_start "$RUN_DIR/kafka"

# Free ports for Portcullis: the bootstrap listener and broker 1's port (broker_port_base + 1).
mapfile -t ports < <(free_ports 2)
LISTENER_PORT=${ports[0]}
BROKER_PORT=${ports[1]}
# The file's values are the documented defaults; these overrides move them out of the way.
export PORTCULLIS_NODE__DATA_DIR="$RUN_DIR/data"
export PORTCULLIS_PLUGINS__DIR="$RUN_DIR/plugins"
export PORTCULLIS_LISTENER__ADDRESS="127.0.0.1:$LISTENER_PORT"
export PORTCULLIS_LISTENER__BROKER_PORT_BASE=$((BROKER_PORT - 1))
export PORTCULLIS_UPSTREAM__BOOTSTRAP_SERVERS="[$KAFKA_BOOTSTRAP]"
BOOTSTRAP="127.0.0.1:$LISTENER_PORT"

"$BIN" check-config --config "$CONFIG"

# `scram add` works offline on the node's data dir (and locks it), so it runs before `serve`.
log "adding SCRAM-SHA-512 user $USER_NAME"
printf '%s\n' "$USER_PASSWORD" |
  "$BIN" scram add --config "$CONFIG" --user "$USER_NAME" --mechanism SCRAM-SHA-512 --password-stdin

log "starting Portcullis on $BOOTSTRAP (broker 1 at 127.0.0.1:$BROKER_PORT), upstream Kafka $KAFKA_BOOTSTRAP"
RUST_LOG=${RUST_LOG:-info} "$BIN" serve --config "$CONFIG" >"$RUN_DIR/portcullis.log" 2>&1 &
PORTCULLIS_PID=$!
wait_for_port 127.0.0.1 "$LISTENER_PORT" 30 "$PORTCULLIS_PID" || die "Portcullis did not start"
wait_for_port 127.0.0.1 "$BROKER_PORT" 30 "$PORTCULLIS_PID" || die "Portcullis did not open broker 1's port"

SASL=(-X security.protocol=SASL_PLAINTEXT -X sasl.mechanism=SCRAM-SHA-512
  -X "sasl.username=$USER_NAME" -X "sasl.password=$USER_PASSWORD")

echo
log "metadata through Portcullis (broker addresses are Portcullis' own):"
kcat_scram -L -b "$BOOTSTRAP" "${SASL[@]}" -m 15 2>&1 | sed 's/^/    /' || true

log "producing 5 messages to '$TOPIC' through Portcullis"
for i in 1 2 3 4 5; do echo "hello from portcullis #$i"; done |
  kcat_scram -P -b "$BOOTSTRAP" "${SASL[@]}" -t "$TOPIC" -X topic.acks=all

log "consuming them back through Portcullis"
consumed=$(kcat_scram -C -b "$BOOTSTRAP" "${SASL[@]}" -t "$TOPIC" -o beginning -e -c 5 -q)
printf '%s\n' "$consumed" | sed 's/^/    /'
[[ $(printf '%s\n' "$consumed" | grep -c '^hello from portcullis #') -eq 5 ]] ||
  die "expected 5 messages back, got: $consumed"

log "a wrong password is refused:"
if kcat_scram -L -b "$BOOTSTRAP" -X security.protocol=SASL_PLAINTEXT -X sasl.mechanism=SCRAM-SHA-512 \
  -X "sasl.username=$USER_NAME" -X sasl.password=wrong -m 3 >/dev/null 2>"$RUN_DIR/wrong.txt"; then
  die "a wrong password was accepted"
fi
grep -m 1 -o 'SASL authentication error: [^(]*' "$RUN_DIR/wrong.txt" | sed 's/^/    /' || true

if ((oauth)); then
  log "OAUTHBEARER: confluent-kafka fetches a token from $OIDC_TOKEN_URL and logs in through Portcullis"
  "$PORTCULLIS_VENV/bin/python" - "$BOOTSTRAP" <<'PY' | sed 's/^/    /'
import os, sys
from confluent_kafka import Consumer, Producer
conf = {"bootstrap.servers": sys.argv[1], "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": os.environ["OIDC_CLIENT_ID"],
        "sasl.oauthbearer.client.secret": os.environ["OIDC_CLIENT_SECRET"],
        "sasl.oauthbearer.token.endpoint.url": os.environ["OIDC_TOKEN_URL"]}
p = Producer(conf)
for i in range(3):
    p.produce("quickstart-oauth", f"hello with a token #{i + 1}".encode())
if p.flush(30) != 0:
    sys.exit("the OAuth producer could not deliver")
c = Consumer({**conf, "group.id": "quickstart-oauth", "auto.offset.reset": "earliest"})
c.subscribe(["quickstart-oauth"])
got = []
while len(got) < 3:
    m = c.poll(30)
    if m is None:
        sys.exit(f"only {len(got)} of 3 messages came back")
    if m.error() is None:
        got.append(m.value().decode())
c.close()
print("\n".join(got))
PY
  ((PIPESTATUS[0] == 0)) || die "the OAUTHBEARER demo failed"
fi

kcat_env=""
[[ -n "$KCAT_LD_LIBRARY_PATH" ]] && kcat_env="LD_LIBRARY_PATH=$KCAT_LD_LIBRARY_PATH "
cat <<EOT

================================ Portcullis quickstart ================================
Kafka $KAFKA_VERSION (PLAINTEXT $KAFKA_BOOTSTRAP) is running behind Portcullis on $BOOTSTRAP.
Portcullis log: $RUN_DIR/portcullis.log

Try it yourself from another terminal:

  # SCRAM-SHA-512 as $USER_NAME through Portcullis
  ${kcat_env}kcat -L -b $BOOTSTRAP -X security.protocol=SASL_PLAINTEXT -X sasl.mechanism=SCRAM-SHA-512 \\
      -X sasl.username=$USER_NAME -X sasl.password=$USER_PASSWORD
  echo 'my message' | ${kcat_env}kcat -P -b $BOOTSTRAP -t $TOPIC -X security.protocol=SASL_PLAINTEXT \\
      -X sasl.mechanism=SCRAM-SHA-512 -X sasl.username=$USER_NAME -X sasl.password=$USER_PASSWORD
  ${kcat_env}kcat -C -b $BOOTSTRAP -t $TOPIC -o beginning -e -X security.protocol=SASL_PLAINTEXT \\
      -X sasl.mechanism=SCRAM-SHA-512 -X sasl.username=$USER_NAME -X sasl.password=$USER_PASSWORD
EOT
if [[ -n "$kcat_env" ]]; then
  cat <<EOT
  (LD_LIBRARY_PATH: your kcat's librdkafka is older than 2.6.1, whose SCRAM Kafka 4.x and
   Portcullis refuse; this runs the same kcat on the newer librdkafka from the test venv.)
EOT
fi
cat <<EOT

The commands above need this script running: its Kafka and temporary data dir go when it stops.
To run a node of your own afterwards, in front of your own Kafka (PLAINTEXT at 127.0.0.1:9092,
the file's default; set PORTCULLIS_UPSTREAM__BOOTSTRAP_SERVERS='[host:port]' for another one):

  cargo build -p portcullis-host
  # examples/quickstart.toml keeps its state under ./data (ignored by git): the credentials in
  # data/, plugins in data/plugins; it listens on 127.0.0.1:9192, broker N on 127.0.0.1:9200+N.
  printf '%s\\n' 'choose-a-password' | target/debug/portcullis scram add --config $CONFIG \\
      --user $USER_NAME --mechanism SCRAM-SHA-512 --password-stdin
  target/debug/portcullis serve --config $CONFIG
=======================================================================================
EOT

if ((exit_after_demo)); then
  ok=1
  log "demo done (--exit); stopping"
  exit 0
fi
log "running; press Ctrl-C to stop Kafka and Portcullis"
ok=1
wait "$PORTCULLIS_PID" || true
ok=0
die "Portcullis exited unexpectedly"
