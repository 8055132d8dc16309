"""KIP-368 re-authentication with OAUTHBEARER tokens of 12 s (OIDC_TOKEN_TTL_SECONDS), clients
running 60 s through Portcullis (Portcullis only: it reads Portcullis' counters).

A session lasts until the token's `exp` (no `connections_max_reauth_ms`: the token's lifetime alone
sets it, as on Kafka's OAUTH listener), so a connection that lives through the 60 s run has
re-authenticated with at least four newer tokens of the same principal, or it would have been
killed at its first request after an expiry. How the count is established without trusting
Portcullis' bookkeeping (test_reauth.py's technique): the clients close connections idle for 3 s,
so a connection that stayed open was in use at least every 3 s; its lifetime comes from the
kernel's socket table (reauth_support.ConnectionTracker); no connection may be killed, no
re-authentication may fail, and successful re-authentications >= 3 x the connections that lived
through the run, by Portcullis' counters and by the clients' own (Java's
successful-reauthentication-total, librdkafka's SaslHandshakes beyond the first per connection).
The provider's count of tokens issued shows the clients fetched new ones.

The three runs (Java producer + consumer, librdkafka producer + consumer, kafkajs producer +
consumer) start together, each with a Portcullis of its own. kafkajs reports no re-authentication
count of its own, so its run is judged by Portcullis' counters, the kernel's socket table and what
kafkajs logged (nothing at WARN or ERROR).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from confluent_kafka import Producer

from clients import confluent_create_topic, value_for
from oauth_support import (confluent_oauth_conf, java_oauth_properties, java_oauth_run, oidc, run_kafkajs,
                           start_oauth_portcullis)
from reauth_support import ConnectionTracker, describe, fresh_metrics, portcullis_ports
from test_reauth import IDLE_CLOSE_MS, RunResult, _broker_stats, _ConfluentTail, _confluent_read_all

__all__ = ["oidc"]

pytestmark = pytest.mark.portcullis_only

RUN_S = 60
MIN_REAUTHS_PER_CONNECTION = 3


def _java_run(java, oidc, node, topic: str, tmp) -> RunResult:
    props = java_oauth_properties(tmp / "oauth-reauth-java.properties", node.bootstrap, oidc,
                                  extra={"connections.max.idle.ms": str(IDLE_CLOSE_MS)})
    res = RunResult()
    issued = oidc.tokens_issued()
    with ConnectionTracker(node.process.proc.pid) as tracker:
        r = java_oauth_run(java, oidc, "ReauthProducer", "produce", str(props), topic, str(RUN_S), "100", "consume",
                           timeout=RUN_S + 180)
    res.metrics = fresh_metrics(node.metrics)
    res.connections = tracker.accepted_on(portcullis_ports(node.process))
    res.extra["tokens_issued"] = oidc.tokens_issued() - issued
    assert r.stdout.strip(), f"ReauthProducer printed nothing ({r.returncode}):\n{r.stderr[-4000:]}"
    res.produced = json.loads(r.stdout.strip().splitlines()[-1])
    res.extra["stderr"] = r.stderr[-4000:]
    v = java_oauth_run(java, oidc, "ReauthProducer", "verify", str(props), topic, str(res.produced["sent"]),
                       timeout=180)
    assert v.stdout.strip(), f"verify printed nothing ({v.returncode}):\n{v.stderr[-4000:]}"
    res.readback = json.loads(v.stdout.strip().splitlines()[-1])
    return res


def _confluent_run(oidc, node, topic: str) -> RunResult:
    client = oidc.client("es256-client")  # ES256 tokens, and a token count of this run's own
    conf = confluent_oauth_conf(node.bootstrap, oidc, client)
    confluent_create_topic(conf, topic, partitions=3)
    stats: list[str] = []
    failures: list[str] = []
    sent: dict[str, bytes] = {}
    res = RunResult()
    issued = oidc.tokens_issued(client)

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(str(err))

    with ConnectionTracker(node.process.proc.pid) as tracker:
        tail = _ConfluentTail(conf, topic)
        tail.start()
        if not tail.ready.wait(90) or tail.errors:
            raise AssertionError(f"the consumer did not get ready: {tail.errors}")
        p = Producer({**conf, "acks": "all", "linger.ms": 5, "connections.max.idle.ms": IDLE_CLOSE_MS,
                      "statistics.interval.ms": 1000, "stats_cb": stats.append})
        end = time.monotonic() + RUN_S
        next_send = time.monotonic()
        i = 0
        while time.monotonic() < end:
            key = f"ok-{i}"
            sent[key] = value_for(key)
            p.produce(topic, key=key.encode(), value=sent[key], on_delivery=on_delivery)
            i += 1
            next_send += 0.01  # 100 records/s
            while (wait := next_send - time.monotonic()) > 0:
                p.poll(wait)
        remaining = p.flush(60)
        p.poll(1.5)
        del p
        tail.target = len(sent)
        tail.join(timeout=90)
    res.metrics = fresh_metrics(node.metrics)
    res.connections = tracker.accepted_on(portcullis_ports(node.process))
    res.extra["tokens_issued"] = oidc.tokens_issued(client) - issued
    res.extra["producer_brokers"] = _broker_stats(stats)
    res.extra["consumer_brokers"] = _broker_stats(tail.stats)
    res.extra["consumer"] = {
        "finished": not tail.is_alive(), "distinct": len(tail.got), "duplicates": tail.duplicates,
        "wrong_values": sum(1 for k, v in tail.got.items() if sent.get(k) != v), "errors": tail.errors[:5],
    }
    res.produced = {"sent": len(sent), "failed": len(failures), "first_errors": failures[:5], "not_flushed": remaining}
    res.readback = _confluent_read_all(conf, topic, sent)
    return res


def _kafkajs_run(oidc, node, topic: str) -> RunResult:
    client = oidc.client("reader-client")  # a token count of this run's own
    # The topic exists, every partition led, before kafkajs starts: left to auto-creation, its
    # first Produce and ListOffsets could reach the broker before the new partition's leader and
    # be answered NOT_LEADER_OR_FOLLOWER, which kafkajs logs and retries (a CI run with the
    # machine loaded: 6 errors logged, 15 records sent twice).
    confluent_create_topic(confluent_oauth_conf(node.bootstrap, oidc, client), topic, partitions=3)
    res = RunResult()
    issued = oidc.tokens_issued(client)
    with ConnectionTracker(node.process.proc.pid) as tracker:
        res.produced = run_kafkajs(oidc, {
            "mode": "steady", "bootstrap": node.bootstrap, "tokenUrl": oidc.token_url,
            "clientId": client.client_id, "clientSecret": client.client_secret,
            "topic": topic, "group": f"{topic}-group", "seconds": RUN_S, "rate": 100,
            # Re-authenticate when less than 4 s of the session is left, with a token at most half
            # its 12 s old: every session is long enough to use (client.js explains).
            "reauthenticationThreshold": 4000, "refreshFraction": 0.5,
        }, timeout=RUN_S + 180)
    res.metrics = fresh_metrics(node.metrics)
    res.connections = tracker.accepted_on(portcullis_ports(node.process))
    res.extra["tokens_issued"] = oidc.tokens_issued(client) - issued
    return res


RUNS = {
    "test_java_clients_reauthenticate_with_fresh_tokens": "java",
    "test_confluent_reauthenticates_with_fresh_tokens": "confluent",
    "test_kafkajs_reauthenticates_with_fresh_tokens": "kafkajs",
}


@pytest.fixture(scope="module")
def runs(request, launcher, oidc, tmp_path_factory):
    wanted = {RUNS[item.originalname] for item in request.session.items
              if item.module is request.module and item.originalname in RUNS}
    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="oauth-reauth")
    futures: dict[str, Future] = {}
    stamp = time.time_ns() % 10**10
    tmp = tmp_path_factory.mktemp("oauth-reauth")
    if "java" in wanted:
        node = start_oauth_portcullis(launcher, oidc, "oauth-reauth-java")
        futures["java"] = pool.submit(_java_run, request.getfixturevalue("java"), oidc, node,
                                      f"oauth-reauth-java-{stamp}", tmp)
    if "confluent" in wanted:
        node = start_oauth_portcullis(launcher, oidc, "oauth-reauth-ck")
        futures["confluent"] = pool.submit(_confluent_run, oidc, node, f"oauth-reauth-ck-{stamp}")
    if "kafkajs" in wanted:
        node = start_oauth_portcullis(launcher, oidc, "oauth-reauth-kjs")
        futures["kafkajs"] = pool.submit(_kafkajs_run, oidc, node, f"oauth-reauth-kjs-{stamp}")
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _report(name: str, res: RunResult) -> None:
    print(f"{name}: produced {res.produced}\nportcullis counters {res.metrics}\n"
          f"connections {describe(res.connections)}\nreadback {res.readback}\n"
          f"extra { {k: v for k, v in res.extra.items() if k != 'stderr'} }")


def _long_lived(res: RunResult) -> list:
    return [c for c in res.connections if c.lifetime >= RUN_S - 10]


def _assert_reauthenticated_throughout(res: RunResult) -> None:
    m = res.metrics
    long_lived = _long_lived(res)
    seen = f"metrics {m}; connections {describe(res.connections)}"
    assert long_lived, f"no client connection lived through the run: {seen}"
    assert m["failed_authentication"] == 0 and m["failed_reauthentication"] == 0, seen
    assert m["expired_connections_killed"] == 0, f"a connection outlived its token: {seen}"
    assert m["successful_reauthentication"] >= MIN_REAUTHS_PER_CONNECTION * len(long_lived), seen
    # A 12 s token cannot carry a 50 s connection: the clients fetched new ones.
    assert res.extra["tokens_issued"] >= RUN_S // 12, res.extra


@pytest.mark.long
def test_java_clients_reauthenticate_with_fresh_tokens(runs):
    """kafka-clients 4.4 (OAuthBearerLoginCallbackHandler refreshes at 80 % of the token's life,
    KIP-368 re-authentication at 85-95 % of the session): 100 records/s for 60 s while a consumer
    reads the topic; no failed send or retry, every record read back."""
    res = runs["java"].result(timeout=RUN_S + 400)
    _report("java", res)
    p, cm = res.produced, res.produced["client_metrics"]
    consumed = p["consumer"]
    assert p["ok"] is True and p["failed"] == 0 and p["acked"] == p["sent"], f"{p}\n{res.extra['stderr']}"
    assert p["sent"] >= RUN_S * 100 * 0.8, p
    assert cm["record-error-total"] == 0 and cm["record-retry-total"] == 0, cm
    assert consumed["ok"] is True and consumed["distinct"] == p["sent"], consumed
    ccm = consumed["client_metrics"]
    assert cm["failed-reauthentication-total"] == 0 and ccm["failed-reauthentication-total"] == 0, p
    _assert_reauthenticated_throughout(res)
    client_reauths = cm["successful-reauthentication-total"] + ccm["successful-reauthentication-total"]
    assert client_reauths >= MIN_REAUTHS_PER_CONNECTION * len(_long_lived(res)), p
    assert res.metrics["successful_reauthentication"] >= client_reauths, (res.metrics, p)
    assert res.readback["ok"] is True, res.readback


@pytest.mark.long
def test_confluent_reauthenticates_with_fresh_tokens(runs):
    """librdkafka 2.16 with its OIDC token fetcher (ES256 tokens of the es256 client): the same."""
    res = runs["confluent"].result(timeout=RUN_S + 400)
    _report("confluent", res)
    p = res.produced
    assert p["failed"] == 0 and p["not_flushed"] == 0, p
    assert p["sent"] >= RUN_S * 100 * 0.8, p
    consumed = res.extra["consumer"]
    assert consumed == {"finished": True, "distinct": p["sent"], "duplicates": 0, "wrong_values": 0,
                        "errors": []}, consumed
    _assert_reauthenticated_throughout(res)
    handles = [*res.extra["producer_brokers"].items(), *res.extra["consumer_brokers"].items()]
    brokers = [b for _, b in handles]
    assert brokers and all(b["disconnects"] == 0 for name, b in handles if name != "GroupCoordinator"), res.extra
    client_reauths = sum(b["handshakes"] - b["connects"] for b in brokers)
    assert client_reauths >= MIN_REAUTHS_PER_CONNECTION * len(_long_lived(res)), res.extra
    assert res.metrics["successful_reauthentication"] >= client_reauths, (res.metrics, res.extra)
    assert res.readback == {**res.readback, "expected": p["sent"], "distinct": p["sent"], "duplicates": 0,
                            "redelivered": 0, "missing": 0, "wrong_values": 0, "unexpected": 0}, res.readback


@pytest.mark.long
def test_kafkajs_reauthenticates_with_fresh_tokens(runs):
    """kafkajs 2.2.4 (re-authentication before a request once the session is nearly over, a new
    token from its `oauthBearerProvider`): 100 records/s for 60 s while a consumer group member
    reads the topic; nothing failed, retried or logged, every record read exactly once."""
    res = runs["kafkajs"].result(timeout=RUN_S + 400)
    _report("kafkajs", res)
    p = res.produced
    assert p["_returncode"] == 0 and p["ok"] is True, json.dumps(p, indent=1)
    assert p["sent"] >= RUN_S * 100 * 0.8 and p["failed"] == 0, p
    assert p["consumed_distinct"] == p["sent"] and p["duplicates"] == 0 and p["bad_values"] == 0, p
    assert p["logged"] == 0 and p["crashed"] is None, p
    _assert_reauthenticated_throughout(res)
