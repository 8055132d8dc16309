#!/usr/bin/env bash
# Start and stop one single-node KRaft Apache Kafka on loopback, for the interop tests, the quickstart
# and the benchmarks. Source it, then:
#
#   kafka_start RUN_DIR     # formats storage, starts the broker, waits until Metadata succeeds
#   kafka_stop              # SIGTERM + wait (SIGKILL after a grace period)
#
# The caller owns the trap (`trap kafka_stop EXIT` or its own cleanup that calls kafka_stop); kafka_start
# prints the broker log when start-up fails, kafka_dump_log prints it later on demand.
#
# After kafka_start these are exported:
#   KAFKA_BOOTSTRAP        127.0.0.1:<port>  PLAINTEXT listener (Portcullis' upstream; ANONYMOUS is a super user)
#   KAFKA_SASL_BOOTSTRAP   127.0.0.1:<port>  SASL_PLAINTEXT listener: SCRAM-SHA-512, SCRAM-SHA-256, PLAIN
#   KAFKA_SASL_REAUTH_BOOTSTRAP  127.0.0.1:<port>  a second SASL_PLAINTEXT listener (named REAUTH), the
#                          same mechanisms and users, with connections.max.reauth.ms=$KAFKA_REAUTH_MS
#                          (KIP-368 re-authentication tests); empty when KAFKA_REAUTH_MS=0
#   KAFKA_SSL_BOOTSTRAP    127.0.0.1:<port>  SSL listener; the client must present a certificate
#                          (ssl.client.auth=required) from the test CA
#   KAFKA_SASL_SSL_BOOTSTRAP  127.0.0.1:<port>  SASL_SSL listener: the SASL listener's mechanisms and
#                          users over TLS, no client certificate
#   KAFKA_TLS_CA           the test CA (PEM) that signed the broker's certificate, made with openssl
#                          for this run; the broker's certificate names IP 127.0.0.1 only (no
#                          DNS name), so connecting as "localhost" fails hostname verification
#   KAFKA_TLS_CLIENT_CERT / KAFKA_TLS_CLIENT_KEY  a client certificate (CN=portcullis-upstream, a
#                          super user) and its key, signed by the same CA
#   KAFKA_CONTROLLER_PORT  the CONTROLLER listener's port
#   KAFKA_PID, KAFKA_RUN_DIR, KAFKA_LOG (the broker's log; the authorizer's decisions, allows too,
#                          go to $KAFKA_RUN_DIR/kafka-authorizer.log instead)
#   KAFKA_SASL_USER / KAFKA_SASL_PASSWORD  a user known to every mechanism of the SASL listener
#   KAFKA_ADMIN_USER / KAFKA_ADMIN_PASSWORD the same for an admin user
#   KAFKA_ACL_USERS        "user:password ..." SCRAM users with no rights of their own (differential
#                          authorization tests, tests/differential)
#   KAFKA_RELAYED_BOOTSTRAPS  "127.0.0.1:<port> ...": KAFKA_RELAYS SASL_PLAINTEXT listeners (RELAYED0,
#                          RELAYED1, …; the SASL listener's mechanisms and users), the i-th advertised
#                          at the i-th address of KAFKA_RELAY_ADDRESSES; empty when KAFKA_RELAYS=0
#   KAFKA_RELAY_ADDRESSES  "127.0.0.1:<port> ...": where the caller's relays must listen (free ports,
#                          picked in one call with the broker's own, so none of these collide; a
#                          later free_ports call may pick one again until the relay binds it, so
#                          start the relays first)
#   KAFKA_OAUTH_BOOTSTRAP  127.0.0.1:<port>  SASL_PLAINTEXT listener (named OAUTH) with OAUTHBEARER only,
#                          validated by Kafka's own OAuthBearerValidatorCallbackHandler (KIP-768) against
#                          $KAFKA_OAUTH_JWKS_URL; empty unless KAFKA_OAUTH_JWKS_URL is set (below)
# The broker runs StandardAuthorizer (allow.everyone.if.no.acl.found=false) with super users admin,
# ANONYMOUS (the PLAINTEXT and CONTROLLER listeners, so Portcullis' upstream keeps every right),
# KAFKA_SASL_USER (the client suite's user when it runs straight against Kafka) and
# CN=portcullis-upstream (the SSL listener's client certificate).
#
#   kafka_launch            starts the broker again on the formatted run dir of an earlier
#                           kafka_start (same ports and data; a restart after kafka_stop or a kill)
# Ports are chosen free at run time, so parallel runs never collide.
#
# KAFKA_EXTRA_PROPERTIES (optional): lines appended to server.properties, for a test's own broker
# (tests/interop/own_kafka.py) that needs a setting the shared one must not have, e.g.
# delegation.token.expiry.time.ms shorter than the token's maximum lifetime.
#
# KAFKA_RELAYS (optional, default 0): how many byte relays the caller puts in front of the broker
# (scripts/bench-datapath.sh --relay-floor). Each gets a listener of its own whose Metadata names
# the relay's address, so a client that bootstraps through a relay stays on it.
#
# KAFKA_OAUTH_JWKS_URL (optional): adds the OAUTH listener, whose tokens are checked against this
# key set (scripts/lib/oidc.sh's provider: scripts/test.sh sets it to OIDC_KAFKA_JWKS_URL), with
# KAFKA_OAUTH_ISSUER as the expected issuer (when set) and KAFKA_OAUTH_AUDIENCE (default kafka) as the
# expected audience, and KAFKA_OAUTH_SUPER_USERS (e.g. "User:client-id", ';'-separated) added to the
# super users, so that a token's principal may produce and consume. The URL is also the JVM's allow-list (org.apache.kafka.sasl.oauthbearer.allowed.urls:
# Kafka 4.x refuses every JWKS and token URL that is not on it).

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Test-only credentials: the broker is bound to loopback and lives for one run.
: "${KAFKA_SASL_USER:=alice}"
: "${KAFKA_SASL_PASSWORD:=alice-secret}"
: "${KAFKA_ADMIN_USER:=admin}"
: "${KAFKA_ADMIN_PASSWORD:=admin-secret}"
: "${KAFKA_ACL_USERS:=bob:bob-secret carol:carol-secret dave:dave-secret}"
# Enables delegation tokens (KIP-48) on the broker, the reference for tests/interop/test_delegation_tokens.py.
: "${KAFKA_DELEGATION_TOKEN_SECRET:=kafka-token-secret}"
export KAFKA_SASL_USER KAFKA_SASL_PASSWORD KAFKA_ADMIN_USER KAFKA_ADMIN_PASSWORD KAFKA_ACL_USERS KAFKA_DELEGATION_TOKEN_SECRET

# In Kafka 4.4 the storage tool is still the Scala object in kafka_2.13 (checked with `unzip -l`:
# kafka/tools/StorageTool.class; org.apache.kafka.tools has no StorageTool).
KAFKA_STORAGE_TOOL_CLASS=kafka.tools.StorageTool
: "${KAFKA_HEAP_OPTS:=-Xms256m -Xmx768m}"
: "${KAFKA_START_TIMEOUT:=90}"
# Session lifetime on the REAUTH listener; 0 leaves the listener out.
: "${KAFKA_REAUTH_MS:=5000}"

# Sets KAFKA_JAVA to the JVM command line (an array, so `"${KAFKA_JAVA[@]}" ... &` makes $! the JVM's
# own pid: a shell function run in the background would put a subshell between us and the JVM, and
# stopping the subshell would orphan the broker).
kafka_java_cmd() {
  local heap
  read -r -a heap <<<"$KAFKA_HEAP_OPTS"
  KAFKA_JAVA=(java "${heap[@]}" -XX:+UseG1GC -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$KAFKA_RUN_DIR/log4j2.properties")
  if [[ -n ${KAFKA_OAUTH_JWKS_URL:-} ]]; then
    KAFKA_JAVA+=("-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$KAFKA_OAUTH_JWKS_URL")
  fi
  KAFKA_JAVA+=(-cp "$KAFKA_LIB/*")
}

kafka_dump_log() {
  local lines=${1:-200}
  [[ -n "${KAFKA_LOG:-}" && -f "$KAFKA_LOG" ]] || return 0
  log "---- last $lines lines of $KAFKA_LOG ----"
  tail -n "$lines" "$KAFKA_LOG" >&2 || true
  log "---- end of Kafka log ----"
}

# Makes the run's TLS material in DIR with openssl: a CA, the broker's key and certificate (IP
# 127.0.0.1 only) in one PEM keystore, and a client certificate for CN=portcullis-upstream.
kafka_make_tls() {
  local dir=$1
  require_tools openssl
  mkdir -p "$dir"
  (
    cd "$dir"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -sha256 -days 2 -subj /CN=portcullis-test-kafka-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -out ca.pem
    local name ext
    for name in broker client; do
      openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$name.key" 2>/dev/null
    done
    openssl req -new -key broker.key -subj /CN=kafka-broker -out broker.csr
    printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
      extendedKeyUsage=serverAuth subjectAltName=IP:127.0.0.1 >broker.ext
    openssl req -new -key client.key -subj /CN=portcullis-upstream -out client.csr
    printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature \
      extendedKeyUsage=clientAuth >client.ext
    for name in broker client; do
      openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -sha256 \
        -extfile "$name.ext" -out "$name.pem" 2>/dev/null
    done
    # Kafka's PEM keystore: the (unencrypted PKCS#8) key, then the certificate chain.
    cat broker.key broker.pem ca.pem >broker-keystore.pem
  ) || die "could not make the TLS material in $dir"
}

# kafka_sasl_jaas LISTENER: the login modules of a SASL listener (lower-case name) that takes the
# SASL listener's mechanisms and users. SCRAM needs a login module but no users in it (credentials
# come from the metadata log, written by the storage tool); PLAIN's users are listed inline.
kafka_sasl_jaas() {
  local l=$1
  echo "listener.name.$l.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
  echo "listener.name.$l.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
  echo "listener.name.$l.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_${KAFKA_ADMIN_USER}=\"${KAFKA_ADMIN_PASSWORD}\" user_${KAFKA_SASL_USER}=\"${KAFKA_SASL_PASSWORD}\";"
}

kafka_write_config() {
  local dir=$KAFKA_RUN_DIR plain_port=$1 sasl_port=$2 ctl_port=$3 ssl_port=$4 sasl_ssl_port=$5 reauth_port=${6:-}
  local oauth_port=${7:-} relayed_ports=${8:-} relay_addresses=${9:-}
  # The optional REAUTH listener: a SASL_PLAINTEXT listener of its own, so its session lifetime
  # leaves the main SASL listener's behaviour alone.
  local reauth_listener='' reauth_map=''
  if [[ -n $reauth_port ]]; then
    reauth_listener=",REAUTH://127.0.0.1:$reauth_port"
    reauth_map=",REAUTH:SASL_PLAINTEXT"
  fi
  # The optional OAUTH listener (OAUTHBEARER with Kafka's JWKS validator).
  if [[ -n $oauth_port ]]; then
    reauth_listener+=",OAUTH://127.0.0.1:$oauth_port"
    reauth_map+=",OAUTH:SASL_PLAINTEXT"
  fi
  # The optional RELAYED<i> listeners, advertised at the relays' addresses.
  local relayed_listeners='' relayed_advertised='' relayed_jaas='' i=0 port advertised
  local -a relayed_addresses
  read -r -a relayed_addresses <<<"$relay_addresses"
  for port in $relayed_ports; do
    advertised=${relayed_addresses[$i]}
    relayed_listeners+=",RELAYED$i://127.0.0.1:$port"
    relayed_advertised+=",RELAYED$i://$advertised"
    reauth_map+=",RELAYED$i:SASL_PLAINTEXT"
    relayed_jaas+="$(kafka_sasl_jaas "relayed$i")
"
    i=$((i + 1))
  done
  cat >"$dir/log4j2.properties" <<PROPS
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
# The authorizer's audit log (every decision: denials at INFO, allows at DEBUG) in a file of its
# own, so tests can check which principal the broker saw (tests/interop/test_delegated.py) without
# flooding kafka.log. Bounded: one 64 MB file and one rolled-over copy.
appender.authorizer.type = RollingFile
appender.authorizer.name = AUTHORIZER
appender.authorizer.fileName = $dir/kafka-authorizer.log
appender.authorizer.filePattern = $dir/kafka-authorizer.log.%i
appender.authorizer.layout.type = PatternLayout
appender.authorizer.layout.pattern = [%d] %p %m (%c)%n
appender.authorizer.policies.type = Policies
appender.authorizer.policies.size.type = SizeBasedTriggeringPolicy
appender.authorizer.policies.size.size = 64MB
appender.authorizer.strategy.type = DefaultRolloverStrategy
appender.authorizer.strategy.max = 1
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = DEBUG
logger.authorizer.additivity = false
logger.authorizer.appenderRef.file.ref = AUTHORIZER
PROPS
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctl_port
listeners=PLAINTEXT://127.0.0.1:$plain_port,SASL_PLAINTEXT://127.0.0.1:$sasl_port,SSL://127.0.0.1:$ssl_port,SASL_SSL://127.0.0.1:$sasl_ssl_port,CONTROLLER://127.0.0.1:$ctl_port$reauth_listener$relayed_listeners
advertised.listeners=PLAINTEXT://127.0.0.1:$plain_port,SASL_PLAINTEXT://127.0.0.1:$sasl_port,SSL://127.0.0.1:$ssl_port,SASL_SSL://127.0.0.1:$sasl_ssl_port$reauth_listener$relayed_advertised
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT$reauth_map
ssl.keystore.type=PEM
ssl.keystore.location=$dir/tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$dir/tls/ca.pem
listener.name.ssl.ssl.client.auth=required
listener.name.sasl_ssl.ssl.client.auth=none
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:${KAFKA_ADMIN_USER};User:ANONYMOUS;User:${KAFKA_SASL_USER};User:CN=portcullis-upstream${oauth_port:+${KAFKA_OAUTH_SUPER_USERS:+;$KAFKA_OAUTH_SUPER_USERS}}
allow.everyone.if.no.acl.found=false
delegation.token.secret.key=${KAFKA_DELEGATION_TOKEN_SECRET}
$(kafka_sasl_jaas sasl_plaintext)
$(kafka_sasl_jaas sasl_ssl)
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
num.network.threads=2
num.io.threads=4
log.segment.bytes=67108864
PROPS
  if [[ -n ${KAFKA_EXTRA_PROPERTIES:-} ]]; then
    printf '%s\n' "$KAFKA_EXTRA_PROPERTIES" >>"$dir/server.properties"
  fi
  printf '%s' "$relayed_jaas" >>"$dir/server.properties"
  if [[ -n $reauth_port ]]; then
    cat >>"$dir/server.properties" <<PROPS
listener.name.reauth.connections.max.reauth.ms=$KAFKA_REAUTH_MS
$(kafka_sasl_jaas reauth)
PROPS
  fi
  if [[ -n $oauth_port ]]; then
    # KIP-768: the validator callback handler with the listener- and mechanism-prefixed settings
    # (looked up as listener.name.<l>.<mech>.<key>). The principal is User:<sub>.
    local issuer_line=''
    [[ -n ${KAFKA_OAUTH_ISSUER:-} ]] && issuer_line="listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.issuer=$KAFKA_OAUTH_ISSUER"
    cat >>"$dir/server.properties" <<PROPS
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url=$KAFKA_OAUTH_JWKS_URL
listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience=${KAFKA_OAUTH_AUDIENCE:-kafka}
$issuer_line
PROPS
  fi
}

kafka_start() {
  local run_dir=${1:?kafka_start RUN_DIR}
  require_tools java python3
  ensure_kcat
  mkdir -p "$run_dir"
  KAFKA_RUN_DIR="$(cd "$run_dir" && pwd)"
  KAFKA_LOG="$KAFKA_RUN_DIR/kafka.log"
  export KAFKA_RUN_DIR KAFKA_LOG

  local ports plain_port sasl_port ctl_port ssl_port sasl_ssl_port reauth_port='' oauth_port=''
  local relays=${KAFKA_RELAYS:-0}
  [[ $relays =~ ^(0|[1-9][0-9]*)$ ]] || die "KAFKA_RELAYS must be a number"
  local wanted=$((7 + 2 * relays))
  mapfile -t ports < <(free_ports "$wanted")
  ((${#ports[@]} == wanted)) || die "could not pick free ports"
  plain_port=${ports[0]} sasl_port=${ports[1]} ctl_port=${ports[2]} ssl_port=${ports[3]} sasl_ssl_port=${ports[4]}
  if ((KAFKA_REAUTH_MS > 0)); then reauth_port=${ports[5]}; fi
  if [[ -n ${KAFKA_OAUTH_JWKS_URL:-} ]]; then oauth_port=${ports[6]}; fi
  kafka_make_tls "$KAFKA_RUN_DIR/tls"
  # Per relay: the broker's listener for it, and the port the relay listens on (advertised).
  local relayed_ports=${ports[*]:7:relays} port relayed=() relay_addresses=()
  for port in $relayed_ports; do relayed+=("127.0.0.1:$port"); done
  for port in "${ports[@]:7+relays:relays}"; do relay_addresses+=("127.0.0.1:$port"); done
  kafka_write_config "$plain_port" "$sasl_port" "$ctl_port" "$ssl_port" "$sasl_ssl_port" "$reauth_port" "$oauth_port" \
    "$relayed_ports" "${relay_addresses[*]}"
  export KAFKA_RELAYED_BOOTSTRAPS="${relayed[*]}" KAFKA_RELAY_ADDRESSES="${relay_addresses[*]}"
  export KAFKA_BOOTSTRAP="127.0.0.1:$plain_port"
  export KAFKA_SASL_BOOTSTRAP="127.0.0.1:$sasl_port"
  export KAFKA_SSL_BOOTSTRAP="127.0.0.1:$ssl_port"
  export KAFKA_SASL_SSL_BOOTSTRAP="127.0.0.1:$sasl_ssl_port"
  export KAFKA_CONTROLLER_PORT=$ctl_port
  export KAFKA_SASL_REAUTH_BOOTSTRAP=${reauth_port:+127.0.0.1:$reauth_port}
  export KAFKA_OAUTH_BOOTSTRAP=${oauth_port:+127.0.0.1:$oauth_port}
  export KAFKA_TLS_CA="$KAFKA_RUN_DIR/tls/ca.pem"
  export KAFKA_TLS_CLIENT_CERT="$KAFKA_RUN_DIR/tls/client.pem"
  export KAFKA_TLS_CLIENT_KEY="$KAFKA_RUN_DIR/tls/client.key"

  # A KRaft cluster id is a base64url (unpadded) 16-byte UUID; making it here saves a JVM start. One
  # that starts with '-' would be read as an option by the storage tool's argument parser.
  local cluster_id
  cluster_id=$(python3 -c '
import base64, uuid
while True:
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not cid.startswith("-"):
        print(cid)
        break')

  log "formatting Kafka storage in $KAFKA_RUN_DIR/data (cluster $cluster_id)"
  local scram=() mech user pass acl_users
  read -r -a acl_users <<<"$KAFKA_ACL_USERS"
  for mech in SCRAM-SHA-512 SCRAM-SHA-256; do
    for user in "$KAFKA_ADMIN_USER:$KAFKA_ADMIN_PASSWORD" "$KAFKA_SASL_USER:$KAFKA_SASL_PASSWORD" "${acl_users[@]}"; do
      pass=${user#*:}
      scram+=(--add-scram "$mech=[name=${user%%:*},password=$pass]")
    done
  done
  kafka_java_cmd
  if ! "${KAFKA_JAVA[@]}" "$KAFKA_STORAGE_TOOL_CLASS" format -t "$cluster_id" -c "$KAFKA_RUN_DIR/server.properties" \
    "${scram[@]}" >"$KAFKA_RUN_DIR/format.log" 2>&1; then
    cat "$KAFKA_RUN_DIR/format.log" >&2
    die "Kafka storage format failed"
  fi

  kafka_launch
}

# Starts the broker on the run dir prepared by kafka_start (KAFKA_RUN_DIR and the exported ports),
# and waits until it answers Metadata. Used by kafka_start, and to restart a stopped or killed broker.
kafka_launch() {
  local plain_port=${KAFKA_BOOTSTRAP##*:} sasl_port=${KAFKA_SASL_BOOTSTRAP##*:}
  local reauth_port=${KAFKA_SASL_REAUTH_BOOTSTRAP##*:} oauth_port=${KAFKA_OAUTH_BOOTSTRAP:-}
  oauth_port=${oauth_port##*:}
  KAFKA_LOG="$KAFKA_RUN_DIR/kafka.log"
  export KAFKA_LOG
  kafka_java_cmd
  log "starting Kafka $KAFKA_VERSION: PLAINTEXT 127.0.0.1:$plain_port, SASL_PLAINTEXT 127.0.0.1:$sasl_port, SSL $KAFKA_SSL_BOOTSTRAP, SASL_SSL $KAFKA_SASL_SSL_BOOTSTRAP${reauth_port:+, REAUTH (SASL_PLAINTEXT, reauth ${KAFKA_REAUTH_MS} ms) 127.0.0.1:$reauth_port}${oauth_port:+, OAUTH (SASL_PLAINTEXT OAUTHBEARER, JWKS $KAFKA_OAUTH_JWKS_URL) 127.0.0.1:$oauth_port}${KAFKA_RELAYED_BOOTSTRAPS:+, RELAYED* (SASL_PLAINTEXT, advertised at $KAFKA_RELAY_ADDRESSES) $KAFKA_RELAYED_BOOTSTRAPS}"
  "${KAFKA_JAVA[@]}" kafka.Kafka "$KAFKA_RUN_DIR/server.properties" >>"$KAFKA_LOG" 2>&1 &
  KAFKA_PID=$!
  export KAFKA_PID

  local started=$SECONDS
  if ! wait_for_port 127.0.0.1 "$plain_port" "$KAFKA_START_TIMEOUT" "$KAFKA_PID" ||
    ! wait_for_port 127.0.0.1 "$sasl_port" 10 "$KAFKA_PID" ||
    ! wait_for_port 127.0.0.1 "${KAFKA_SSL_BOOTSTRAP##*:}" 10 "$KAFKA_PID" ||
    ! wait_for_port 127.0.0.1 "${KAFKA_SASL_SSL_BOOTSTRAP##*:}" 10 "$KAFKA_PID" ||
    { [[ -n $reauth_port ]] && ! wait_for_port 127.0.0.1 "$reauth_port" 10 "$KAFKA_PID"; } ||
    { [[ -n $oauth_port ]] && ! wait_for_port 127.0.0.1 "$oauth_port" 10 "$KAFKA_PID"; } ||
    ! kafka_wait_relayed_ports; then
    kafka_dump_log
    kafka_stop
    die "Kafka did not open its ports"
  fi
  # An open port is not a working broker: wait until a Metadata request lists broker 1.
  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  until kcat -L -b "$KAFKA_BOOTSTRAP" -m 5 2>/dev/null | grep -q "broker 1 at 127.0.0.1:$plain_port"; do
    if ((SECONDS >= deadline)) || ! kill -0 "$KAFKA_PID" 2>/dev/null; then
      kafka_dump_log
      kafka_stop
      die "Kafka did not answer Metadata"
    fi
    sleep 0.5
  done
  log "Kafka ready after $((SECONDS - started))s (pid $KAFKA_PID, log $KAFKA_LOG)"
}

# Waits for the RELAYED listeners (KAFKA_RELAYS) of the broker just launched.
kafka_wait_relayed_ports() {
  local address
  for address in ${KAFKA_RELAYED_BOOTSTRAPS:-}; do
    wait_for_port 127.0.0.1 "${address##*:}" 10 "$KAFKA_PID" || return 1
  done
}

# kafka_wait_group_coordinator [TIMEOUT_SECONDS]: waits until the broker serves consumer groups.
# A new broker creates its offsets topic (__consumer_offsets, 50 partitions) at the first
# FindCoordinator, which on a busy two-core machine takes long enough that the first group client
# of a run can run out of its retries (kafkajs 2.2.4 gives up after 5). The suite's tests are about
# what comes after, so the shared broker is made ready for them first. Needs the test venv.
kafka_wait_group_coordinator() {
  local timeout=${1:-120}
  "$PORTCULLIS_VENV/bin/python" - "$KAFKA_BOOTSTRAP" "$timeout" <<'PY' || die "Kafka's group coordinator did not become available"
import sys, time
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
bootstrap, timeout = sys.argv[1], float(sys.argv[2])
admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
deadline = time.monotonic() + timeout
while True:
    try:
        # A group nobody uses: its description needs the coordinator, so the offsets topic.
        admin.describe_consumer_groups(["portcullis-suite-warmup"])["portcullis-suite-warmup"].result(timeout=30)
        break
    except KafkaException as e:
        if time.monotonic() > deadline:
            sys.exit(f"no group coordinator after {timeout:.0f}s: {e}")
        time.sleep(0.5)
PY
  log "Kafka's group coordinator is available"
}

kafka_stop() {
  if [[ -n "${KAFKA_PID:-}" ]]; then
    stop_pid "$KAFKA_PID" 30
    KAFKA_PID=
  fi
}

# Writes the exported variables as a sourceable env file (for a second shell or a CI step).
kafka_env_file() {
  local f=${1:?kafka_env_file FILE}
  {
    for v in KAFKA_BOOTSTRAP KAFKA_SASL_BOOTSTRAP KAFKA_SASL_REAUTH_BOOTSTRAP KAFKA_SSL_BOOTSTRAP KAFKA_SASL_SSL_BOOTSTRAP \
      KAFKA_TLS_CA KAFKA_TLS_CLIENT_CERT KAFKA_TLS_CLIENT_KEY KAFKA_CONTROLLER_PORT KAFKA_PID KAFKA_RUN_DIR KAFKA_LOG \
      KAFKA_LIB KAFKA_SASL_USER KAFKA_SASL_PASSWORD KAFKA_ADMIN_USER KAFKA_ADMIN_PASSWORD KAFKA_ACL_USERS KAFKA_REAUTH_MS \
      KAFKA_OAUTH_BOOTSTRAP KAFKA_RELAYED_BOOTSTRAPS KAFKA_RELAY_ADDRESSES; do
      printf 'export %s=%q\n' "$v" "${!v}"
    done
  } >"$f"
}
