"""KIP-368 on Portcullis' upstream side: Kafka's REAUTH listener gives every session 5 s
(scripts/lib/kafka.sh, `connections.max.reauth.ms=5000`) and kills a connection at its first request
after expiry, so Portcullis must re-authenticate its own upstream connections (SCRAM-SHA-512, as the
Kafka admin user) before their sessions end.

A Java producer sends 100 records/s through Portcullis for 60 s while a consumer reads them (its
Fetch requests, parked by Kafka for up to 500 ms, are in flight when an upstream session is renewed);
the client side has no session lifetime, so anything that breaks is the upstream side. Proof that the upstream connections were
re-authenticated rather than replaced: the upstream connections Portcullis holds (from the kernel)
live through the whole run, none that carried traffic ends early, the client never loses a
connection or retries a send, and Portcullis logs no warning or error.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from conftest import host_port
from reauth_support import (ConnectionTracker, ReauthConn, describe, portcullis_ports, reauth_kafka_bootstrap,
                            start_portcullis)

pytestmark = pytest.mark.portcullis_only

RUN_S = 60
KAFKA_LIFETIME_MS = 5000  # KAFKA_REAUTH_MS in scripts/lib/kafka.sh
WARN_OR_ERROR = re.compile(r"^\S+\s+(WARN|ERROR)\b", re.MULTILINE)


@pytest.fixture(scope="module")
def upstream_reauth_portcullis(launcher, kafka_env):
    upstream = {
        "bootstrap_servers": [reauth_kafka_bootstrap()],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": kafka_env["KAFKA_ADMIN_USER"],
        "password": kafka_env["KAFKA_ADMIN_PASSWORD"],
    }
    p, _ = start_portcullis(launcher, "upstream-reauth", upstream=upstream)
    return p


def test_kafka_reauth_listener_gives_sessions_a_lifetime(kafka_env):
    """The control: without it the main test would prove nothing."""
    host, port = host_port(reauth_kafka_bootstrap())
    with ReauthConn(host, port) as c:
        c.api_versions()
        result = c.login_plain(kafka_env["KAFKA_ADMIN_USER"], kafka_env["KAFKA_ADMIN_PASSWORD"])
        assert result.session_lifetime_ms == KAFKA_LIFETIME_MS, result


@pytest.mark.long
def test_upstream_connections_are_reauthenticated_for_60s(upstream_reauth_portcullis, java, kafka_env,
                                                           tmp_path, unique):
    p = upstream_reauth_portcullis
    kafka_port = host_port(reauth_kafka_bootstrap())[1]
    props = tmp_path / "client.properties"
    props.write_text(
        f"bootstrap.servers={p.bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="carol" password="carol-through-portcullis";\n'
    )
    topic = unique("up-reauth")
    log_offset = p.log_size()
    with ConnectionTracker(p.proc.pid) as tracker:
        r = java.run("ReauthProducer", "produce", str(props), topic, str(RUN_S), "100", "consume",
                     timeout=RUN_S + 180)
        finished = time.monotonic()
    assert r.stdout.strip(), f"ReauthProducer printed nothing ({r.returncode}):\n{r.stderr[-4000:]}"
    produced = json.loads(r.stdout.strip().splitlines()[-1])
    log = p.log_since(log_offset, 10_000)
    upstream = tracker.connected_to(kafka_port)
    clients = tracker.accepted_on(portcullis_ports(p))
    seen = (f"upstream connections: {describe(upstream)}\nclient connections: {describe(clients)}\n"
            f"producer: {produced}")

    print(seen)  # evidence for the junit log (pytest shows it with -rP)

    # The client saw nothing: no failed send, no retry, no lost connection.
    cm = produced["client_metrics"]
    consumed = produced["consumer"]
    assert produced["ok"] is True and produced["failed"] == 0, f"{seen}\n{r.stderr[-3000:]}"
    assert produced["sent"] >= RUN_S * 100 * 0.8, seen
    assert cm["record-retry-total"] == 0 and cm["record-error-total"] == 0, seen
    assert cm["connection-close-total"] == 0, f"the producer lost a connection: {seen}"
    assert consumed["ok"] is True and consumed["distinct"] == produced["sent"], seen
    assert consumed["client_metrics"]["connection-close-total"] == 0, f"the consumer lost a connection: {seen}"

    # Portcullis' upstream connections lived through the run: at least two (the producer's and the
    # consumer's) for all of it, and none that outlived a session (so carried traffic past an expiry) ended early.
    assert sum(c.lifetime >= RUN_S - 10 for c in upstream) >= 2, seen
    cut = [c for c in upstream if c.lifetime >= KAFKA_LIFETIME_MS / 1000 - 1 and c.last_seen < finished - 3]
    assert not cut, f"upstream connections ended during the run: {describe(cut)}\n{seen}"
    assert not WARN_OR_ERROR.findall(log), f"Portcullis logged warnings or errors:\n{log[-4000:]}"

    v = java.run("ReauthProducer", "verify", str(props), topic, str(produced["sent"]), timeout=180)
    assert v.stdout.strip(), f"verify printed nothing ({v.returncode}):\n{v.stderr[-4000:]}"
    readback = json.loads(v.stdout.strip().splitlines()[-1])
    assert readback["ok"] is True, readback
