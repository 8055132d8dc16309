"""Portcullis logs in upstream with OAUTHBEARER (Portcullis only): `[upstream.login] plugin =
"oauth-client-credentials"` fetches tokens of 12 s from the provider's token endpoint, and the
upstream is Kafka's own OAUTH listener (scripts/lib/kafka.sh: KIP-768 validator), which gives every
session the token's remaining lifetime and kills a connection at its first request after that. So
Portcullis must refresh its token and re-authenticate its upstream connections with the new one
(KIP-368 client side) several times a minute.

A Java producer sends 100 records/s through Portcullis for 60 s (the clients log in with
SCRAM-SHA-512, whose sessions have no lifetime: anything that breaks is the upstream side) while a
consumer reads them. As in test_upstream_reauth.py: the upstream connections (from the kernel) live
through the run and none that carried traffic ends early, the clients lose no connection and never
retry, Portcullis logs no warning or error, every record is read back; and the provider issued new
tokens to Portcullis' client during the run.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from conftest import PORTCULLIS_USERS, host_port
from oauth_support import OAuthConn, kafka_oauth_bootstrap, oidc, start_oauth_portcullis
from reauth_support import ConnectionTracker, describe, portcullis_ports

__all__ = ["oidc"]

pytestmark = pytest.mark.portcullis_only

RUN_S = 60
WARN_OR_ERROR = re.compile(r"^\S+\s+(WARN|ERROR)\b", re.MULTILINE)


def test_kafka_oauth_listener_gives_sessions_the_tokens_lifetime(oidc):
    """The control: Kafka's OAUTH listener bounds a session by the token's exp."""
    host, port = host_port(kafka_oauth_bootstrap())
    with OAuthConn(host, port) as c:
        c.api_versions()
        r = c.oauth_login(oidc.token())
    assert r.accepted and 0 < r.session_lifetime_ms <= oidc.ttl * 1000, r


@pytest.fixture(scope="module")
def upstream_oauth_node(launcher, oidc):
    c = oidc.client()
    upstream = {
        "bootstrap_servers": [kafka_oauth_bootstrap()],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
    }
    sections = {
        "upstream.login": {"plugin": "oauth-client-credentials"},
        "plugins.config.oauth-client-credentials": {
            "token_endpoint_url": oidc.token_url,
            "allowed_urls": [oidc.allowed_prefix],
            "client_id": c.client_id,
            # Test-only secret of a loopback provider; the suite's nodes get no PORTCULLIS_* variables.
            "client_secret": c.client_secret,
        },
    }
    return start_oauth_portcullis(launcher, oidc, "oauth-upstream", oauthbearer={}, mechanisms=["SCRAM-SHA-512"],
                                  upstream=upstream, sections=sections)


@pytest.mark.long
def test_upstream_oauth_login_refreshes_and_reauthenticates_for_60s(upstream_oauth_node, oidc, java, tmp_path,
                                                                     unique):
    node = upstream_oauth_node
    p = node.process
    kafka_port = host_port(kafka_oauth_bootstrap())[1]
    props = tmp_path / "client.properties"
    props.write_text(
        f"bootstrap.servers={p.bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="carol" password="{PORTCULLIS_USERS["carol"]}";\n'
    )
    topic = unique("oauth-upstream")
    log_offset = p.log_size()
    issued = oidc.tokens_issued()
    with ConnectionTracker(p.proc.pid) as tracker:
        r = java.run("ReauthProducer", "produce", str(props), topic, str(RUN_S), "100", "consume",
                     timeout=RUN_S + 180)
        finished = time.monotonic()
    tokens = oidc.tokens_issued() - issued
    assert r.stdout.strip(), f"ReauthProducer printed nothing ({r.returncode}):\n{r.stderr[-4000:]}"
    produced = json.loads(r.stdout.strip().splitlines()[-1])
    log = p.log_since(log_offset, 10_000)
    upstream = tracker.connected_to(kafka_port)
    clients = tracker.accepted_on(portcullis_ports(p))
    seen = (f"upstream connections: {describe(upstream)}\nclient connections: {describe(clients)}\n"
            f"tokens issued to Portcullis' client during the run: {tokens}\nproducer: {produced}")
    print(seen)

    cm = produced["client_metrics"]
    consumed = produced["consumer"]
    assert produced["ok"] is True and produced["failed"] == 0, f"{seen}\n{r.stderr[-3000:]}"
    assert produced["sent"] >= RUN_S * 100 * 0.8, seen
    assert cm["record-retry-total"] == 0 and cm["record-error-total"] == 0, seen
    assert cm["connection-close-total"] == 0, f"the producer lost a connection: {seen}"
    assert consumed["ok"] is True and consumed["distinct"] == produced["sent"], seen
    assert consumed["client_metrics"]["connection-close-total"] == 0, f"the consumer lost a connection: {seen}"

    # 12 s tokens over 60 s: Portcullis fetched new ones, and its upstream connections, which a
    # session of one token could not carry past 12 s, lived through the run.
    assert tokens >= RUN_S // 12 - 1, seen
    assert sum(c.lifetime >= RUN_S - 10 for c in upstream) >= 2, seen
    cut = [c for c in upstream if c.lifetime >= oidc.ttl - 1 and c.last_seen < finished - 3]
    assert not cut, f"upstream connections ended during the run: {describe(cut)}\n{seen}"
    assert not WARN_OR_ERROR.findall(log), f"Portcullis logged warnings or errors:\n{log[-4000:]}"

    v = java.run("ReauthProducer", "verify", str(props), topic, str(produced["sent"]), timeout=180)
    assert v.stdout.strip(), f"verify printed nothing ({v.returncode}):\n{v.stderr[-4000:]}"
    readback = json.loads(v.stdout.strip().splitlines()[-1])
    assert readback["ok"] is True, readback
