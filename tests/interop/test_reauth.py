"""KIP-368 re-authentication on Portcullis' client listener, with real clients and hand-made frames.

Every Portcullis here has a 5 s session lifetime (`connections_max_reauth_ms = 5000`, or the
per-mechanism table) and serves its security counters on a Prometheus admin endpoint.

Client runs (each against a Portcullis of its own, so its counters belong to that client alone; the
three run at the same time, started by the module fixture, while the wire tests run):
- the Java clients and librdkafka (confluent-kafka) re-authenticate at 85-95 % of the lifetime: a
  producer and a consumer reading the same topic (Fetch requests in flight) must run for 60 s
  without a single error, retry or killed connection;
- kafka-python 2.x never re-authenticates: it must be cut off at its first request after each expiry
  and carry on by reconnecting, with every record delivered.

How "every connection re-authenticated >= 10 times" is established: the clients close connections
idle for 3 s (`connections.max.idle.ms`), so a connection that stayed open for the whole run was in
use at least every 3 s; with a 5 s lifetime such a connection is killed at its first request after an
expiry unless it re-authenticated in time (the kill itself is proved by the kafka-python run and the
expiry wire test). So: no connection killed, no failed re-authentication, and
successful_reauthentication >= 10 x the connections that lived through the run (seen in the kernel's
socket table, not reported by Portcullis).

Wire tests run against Kafka's REAUTH listener too (scripts/lib/kafka.sh: the same 5 s lifetime):
Kafka is the reference, so a wire test Kafka fails is a wrong test.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from clients import confluent_conf, confluent_create_topic, kafka_python_conf, value_for
from conftest import PORTCULLIS_USERS, Gateway, _portcullis_gateway, host_port
from kafka_wire import (API_SASL_AUTHENTICATE, ERROR_NONE, ERROR_SASL_AUTHENTICATION_FAILED, Closed, byte_array,
                        plain_token, request)
from reauth_support import (ERROR_ILLEGAL_SASL_STATE, ConnectionTracker, CountsChange, ReauthConn, describe,
                            fresh_metrics, portcullis_ports, reauth_kafka_bootstrap, start_portcullis)

LIFETIME_MS = 5000
LONG_RUN_S = 60  # Java and librdkafka: >= 10 re-authentications per connection at 85-95 % of 5 s
SHORT_RUN_S = 20  # kafka-python: three or four expiries
MIN_REAUTHS_PER_CONNECTION = 10
IDLE_CLOSE_MS = 3000


# --------------------------------------------------------------------------------------------------
# Client runs in the background


@dataclass
class RunResult:
    """What one client run saw, plus Portcullis' counters right after the produce phase."""

    produced: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    connections: list = field(default_factory=list)  # TrackedConnection, client side accepted by Portcullis
    readback: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def _java_run(java, gw: Gateway, metrics_file, topic: str, tmp) -> RunResult:
    user, password = gw.user("alice")
    props = tmp / "reauth-java.properties"
    props.write_text(
        f"bootstrap.servers={gw.bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
        f"connections.max.idle.ms={IDLE_CLOSE_MS}\n"
    )
    res = RunResult()
    with ConnectionTracker(gw.process.proc.pid) as tracker:
        r = java.run("ReauthProducer", "produce", str(props), topic, str(LONG_RUN_S), "100", "consume",
                     timeout=LONG_RUN_S + 180)
    res.metrics = fresh_metrics(metrics_file)
    res.connections = tracker.accepted_on(portcullis_ports(gw.process))
    assert r.stdout.strip(), f"ReauthProducer printed nothing ({r.returncode}):\n{r.stderr[-4000:]}"
    res.produced = json.loads(r.stdout.strip().splitlines()[-1])
    res.extra["stderr"] = r.stderr[-4000:]
    v = java.run("ReauthProducer", "verify", str(props), topic, str(res.produced["sent"]), timeout=180)
    assert v.stdout.strip(), f"verify printed nothing ({v.returncode}):\n{v.stderr[-4000:]}"
    res.readback = json.loads(v.stdout.strip().splitlines()[-1])
    return res


def _broker_stats(stats: list[str]) -> dict:
    """librdkafka's own view from its last statistics, per broker handle: connections made and lost,
    SASL handshakes sent (each beyond the first on a connection is a re-authentication)."""
    last = json.loads(stats[-1]) if stats else {"brokers": {}}
    return {
        name: {"connects": b.get("connects", 0), "disconnects": b.get("disconnects", 0),
               "handshakes": b.get("req", {}).get("SaslHandshake", 0)}
        for name, b in last["brokers"].items()
    }


class _ConfluentTail(threading.Thread):
    """A librdkafka consumer reading the topic (all partitions from the start, no group) while it is
    written, so its prefetching Fetch requests are in flight when it re-authenticates."""

    def __init__(self, conf: dict, topic: str):
        super().__init__(name="reauth-confluent-tail", daemon=True)
        self.conf, self.topic = conf, topic
        self.stats: list[str] = []
        self.got: dict[str, bytes] = {}
        self.duplicates = 0
        self.errors: list[str] = []
        self.target: int | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        c = Consumer({**self.conf, "group.id": f"reauth-tail-{self.topic}", "enable.auto.commit": False,
                      "connections.max.idle.ms": IDLE_CLOSE_MS, "statistics.interval.ms": 1000,
                      "stats_cb": self.stats.append})
        try:
            partitions = c.list_topics(self.topic, timeout=30).topics[self.topic].partitions
            c.assign([TopicPartition(self.topic, pid, OFFSET_BEGINNING) for pid in partitions])
            self.ready.set()
            deadline = None
            while self.target is None or len(self.got) < self.target:
                if self.target is not None and deadline is None:
                    deadline = time.monotonic() + 60
                if deadline is not None and time.monotonic() > deadline:
                    break
                msg = c.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                key = msg.key().decode()
                if key in self.got:
                    self.duplicates += 1
                self.got[key] = msg.value()
            c.poll(1.5)  # one more statistics callback
        except Exception as e:  # noqa: BLE001 - reported through the result
            self.errors.append(repr(e))
        finally:
            self.ready.set()  # also on failure: the producer side must not wait for nothing
            c.close()


def _confluent_run(gw: Gateway, metrics_file, topic: str) -> RunResult:
    user, password = gw.user("alice")
    conf = confluent_conf(gw, "SCRAM-SHA-256", user, password)
    confluent_create_topic(conf, topic, partitions=3)
    _await_served(conf, topic)
    stats: list[str] = []
    failures: list[str] = []
    sent: dict[str, bytes] = {}
    res = RunResult()

    def on_delivery(err, msg):
        if err is not None:
            failures.append(str(err))

    # The set-up clients are closed: from here on only these two connect, and the counters are
    # read as what changed while they ran.
    before = fresh_metrics(metrics_file)
    with ConnectionTracker(gw.process.proc.pid) as tracker:
        tail = _ConfluentTail(conf, topic)
        tail.start()
        if not tail.ready.wait(90) or tail.errors:
            raise AssertionError(f"the consumer did not get ready: {tail.errors}")
        p = Producer({**conf, "acks": "all", "linger.ms": 5, "connections.max.idle.ms": IDLE_CLOSE_MS,
                      "statistics.interval.ms": 1000, "stats_cb": stats.append})
        end = time.monotonic() + LONG_RUN_S
        next_send = time.monotonic()
        i = 0
        while time.monotonic() < end:
            key = f"ck-{i}"
            sent[key] = value_for(key)
            p.produce(topic, key=key.encode(), value=sent[key], on_delivery=on_delivery)
            i += 1
            next_send += 0.01  # 100 records/s
            while (wait := next_send - time.monotonic()) > 0:
                p.poll(wait)
        remaining = p.flush(60)
        p.poll(1.5)  # one more statistics callback after the last request
        del p
        tail.target = len(sent)
        tail.join(timeout=90)
    after = fresh_metrics(metrics_file)
    res.metrics = {k: after[k] - before[k] for k in after}
    res.extra["before"] = before
    res.connections = tracker.accepted_on(portcullis_ports(gw.process))
    res.extra["producer_brokers"] = _broker_stats(stats)
    res.extra["consumer_brokers"] = _broker_stats(tail.stats)
    res.extra["consumer"] = {
        "finished": not tail.is_alive(), "distinct": len(tail.got), "duplicates": tail.duplicates,
        "wrong_values": sum(1 for k, v in tail.got.items() if sent.get(k) != v), "errors": tail.errors[:5],
    }
    res.produced = {"sent": len(sent), "failed": len(failures), "first_errors": failures[:5],
                    "not_flushed": remaining}
    res.readback = _confluent_read_all(conf, topic, sent)
    return res


def _confluent_read_all(conf: dict, topic: str, sent: dict[str, bytes], timeout: float = 90) -> dict:
    """Reads every partition from the beginning (no group) and compares with `sent`. A key stored
    twice (at two offsets) is a duplicate write; the same offset delivered twice is a redelivery by
    the consumer. Both are counted apart, so a failure says which side went wrong."""
    c = Consumer({**conf, "group.id": f"reauth-readback-{topic}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    got: dict[str, bytes] = {}
    offsets: dict[str, set[tuple[int, int]]] = {}
    redelivered = 0
    try:
        md = c.list_topics(topic, timeout=30)
        parts = [TopicPartition(topic, pid, 0) for pid in md.topics[topic].partitions]
        ends = sum(c.get_watermark_offsets(tp, timeout=30)[1] for tp in parts)
        c.assign(parts)
        seen_offsets: set[tuple[int, int]] = set()
        deadline = time.monotonic() + timeout
        while len(seen_offsets) < ends and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            where = (msg.partition(), msg.offset())
            if where in seen_offsets:
                redelivered += 1
                continue
            seen_offsets.add(where)
            key = msg.key().decode()
            offsets.setdefault(key, set()).add(where)
            got[key] = msg.value()
    finally:
        c.close()
    duplicated = {k: sorted(v) for k, v in offsets.items() if len(v) > 1}
    missing = [k for k in sent if k not in got]
    wrong = [k for k in sent if k in got and got[k] != sent[k]]
    unexpected = [k for k in got if k not in sent]
    return {"expected": len(sent), "distinct": len(got), "duplicates": len(duplicated),
            "first_duplicates": dict(list(duplicated.items())[:5]), "redelivered": redelivered,
            "missing": len(missing), "first_missing": missing[:5], "wrong_values": len(wrong),
            "unexpected": len(unexpected)}


def _await_served(conf: dict, topic: str, timeout: float = 60) -> None:
    """Waits until every partition of a new topic answers ListOffsets, so a timed run starts on a
    topic the broker already serves (not in the middle of its creation)."""
    c = Consumer({**conf, "group.id": f"reauth-await-{topic}"})
    try:
        deadline = time.monotonic() + timeout
        for pid in sorted(c.list_topics(topic, timeout=30).topics[topic].partitions):
            while True:
                try:
                    c.get_watermark_offsets(TopicPartition(topic, pid), timeout=5)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
    finally:
        c.close()


def _kafka_python_run(gw: Gateway, metrics_file, topic: str) -> RunResult:
    user, password = gw.user("alice")
    res = RunResult()
    setup = confluent_conf(gw, "SCRAM-SHA-512", user, password)
    confluent_create_topic(setup, topic, partitions=3)
    _await_served(setup, topic)
    before = fresh_metrics(metrics_file)
    sent: dict[str, bytes] = {}
    errors: list[str] = []
    with ConnectionTracker(gw.process.proc.pid) as tracker:
        # kafka-python's default retries (unbounded) resend a batch whose connection was cut.
        producer = KafkaProducer(acks="all", linger_ms=5, **kafka_python_conf(gw, "SCRAM-SHA-512", user, password))
        try:
            futures = []
            end = time.monotonic() + SHORT_RUN_S
            i = 0
            while time.monotonic() < end:
                key = f"kp-{i}"
                sent[key] = value_for(key)
                futures.append(producer.send(topic, key=key.encode(), value=sent[key]))
                i += 1
                time.sleep(0.05)
            producer.flush(timeout=60)
            for f in futures:
                try:
                    f.get(timeout=30)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    errors.append(repr(e))
        finally:
            producer.close(timeout=10)
    res.metrics = fresh_metrics(metrics_file)
    res.extra["before"] = before
    res.connections = tracker.accepted_on(portcullis_ports(gw.process))
    res.produced = {"sent": len(sent), "failed": len(errors), "first_errors": errors[:5]}
    res.readback = _confluent_read_all(setup, topic, sent)
    return res


class BackgroundRuns:
    """The client runs of this module, started together; each test waits for its own."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="reauth-run")
        self.futures: dict[str, Future] = {}
        self.gateways: dict[str, Gateway] = {}
        self.metrics_files: dict = {}

    def result(self, name: str) -> RunResult:
        if name not in self.futures:
            raise AssertionError(f"the {name} run was not started (module fixture saw no such test)")
        return self.futures[name].result(timeout=LONG_RUN_S + 300)


RUNS = {
    "test_java_producer_reauthenticates_every_connection": "java",
    "test_confluent_producer_reauthenticates_every_connection": "confluent",
    "test_kafka_python_is_cut_off_after_expiry_and_reconnects": "kafka_python",
}


@pytest.fixture(scope="module", autouse=True)
def background_runs(request, kafka_env, tmp_path_factory):
    """Starts the selected client runs at once, each with a Portcullis of its own, before the first
    test of the module; the wire tests run while they produce."""
    wanted = {RUNS[item.originalname] for item in request.session.items
              if item.module is request.module and item.originalname in RUNS}
    runs = BackgroundRuns()
    if not wanted:
        yield runs
        return
    launcher = request.getfixturevalue("launcher")
    tmp = tmp_path_factory.mktemp("reauth-runs")
    stamp = time.time_ns() % 10**10
    for name in sorted(wanted):
        if name == "confluent":
            # The per-mechanism table alone turns re-authentication on, and only for SCRAM-SHA-256.
            p, mf = start_portcullis(launcher, f"reauth-{name}",
                                     reauth_ms_by_mechanism={"SCRAM-SHA-256": LIFETIME_MS})
        else:
            p, mf = start_portcullis(launcher, f"reauth-{name}",
                                     listener={"connections_max_reauth_ms": LIFETIME_MS})
        runs.gateways[name] = _portcullis_gateway(p.name, p, kafka_env, "SASL_PLAINTEXT", None)
        runs.metrics_files[name] = mf
    if "java" in wanted:
        java = request.getfixturevalue("java")
        runs.futures["java"] = runs.pool.submit(_java_run, java, runs.gateways["java"], runs.metrics_files["java"],
                                                f"reauth-java-{stamp}", tmp)
    if "confluent" in wanted:
        runs.futures["confluent"] = runs.pool.submit(_confluent_run, runs.gateways["confluent"],
                                                     runs.metrics_files["confluent"], f"reauth-ck-{stamp}")
    if "kafka_python" in wanted:
        runs.futures["kafka_python"] = runs.pool.submit(_kafka_python_run, runs.gateways["kafka_python"],
                                                        runs.metrics_files["kafka_python"], f"reauth-kp-{stamp}")
    yield runs
    runs.pool.shutdown(wait=True, cancel_futures=True)


def _report(name: str, res: RunResult) -> None:
    """Evidence for the junit log (pytest shows it with -rP)."""
    print(f"{name}: produced {res.produced}\nportcullis counters {res.metrics}\n"
          f"connections {describe(res.connections)}\nreadback {res.readback}\nextra "
          f"{ {k: v for k, v in res.extra.items() if k != 'stderr'} }")


def _long_lived(res: RunResult, run_s: float) -> list:
    return [c for c in res.connections if c.lifetime >= run_s - 10]


def _assert_reauthenticated_throughout(res: RunResult, run_s: float) -> None:
    m = res.metrics
    long_lived = _long_lived(res, run_s)
    seen = f"metrics {m}; connections {describe(res.connections)}"
    assert long_lived, f"no client connection lived through the run: {seen}"
    assert m["failed_authentication"] == 0, seen
    assert m["failed_reauthentication"] == 0, seen
    assert m["expired_connections_killed"] == 0, f"a connection outlived its session: {seen}"
    assert m["successful_authentication"] >= len(res.connections), seen
    assert m["successful_reauthentication"] >= MIN_REAUTHS_PER_CONNECTION * len(long_lived), seen


# --------------------------------------------------------------------------------------------------
# Wire tests: Kafka's REAUTH listener (reference) and a Portcullis with a 5 s lifetime. On Portcullis
# each test also checks how its counters moved (exactly).


@dataclass
class Endpoint:
    host: str
    port: int
    user: tuple[str, str]
    other_user: tuple[str, str]  # another principal that may log in on this listener
    metrics_file: Path | None = None

    def counts(self, **deltas: int) -> CountsChange:
        return CountsChange(self.metrics_file, **deltas)


@pytest.fixture(scope="module")
def portcullis_wire_endpoint(launcher) -> Endpoint:
    p, mf = start_portcullis(launcher, "reauth-wire", listener={"connections_max_reauth_ms": LIFETIME_MS})
    return Endpoint("127.0.0.1", p.listener_port, ("alice", PORTCULLIS_USERS["alice"]),
                    ("carol", PORTCULLIS_USERS["carol"]), mf)


@pytest.fixture(params=["kafka", pytest.param("portcullis", marks=pytest.mark.portcullis_only)])
def endpoint(request, kafka_env) -> Endpoint:
    if request.param == "kafka":
        host, port = host_port(reauth_kafka_bootstrap())
        return Endpoint(host, port, (kafka_env["KAFKA_SASL_USER"], kafka_env["KAFKA_SASL_PASSWORD"]),
                        (kafka_env["KAFKA_ADMIN_USER"], kafka_env["KAFKA_ADMIN_PASSWORD"]))
    return request.getfixturevalue("portcullis_wire_endpoint")


def _login(ep: Endpoint) -> ReauthConn:
    c = ReauthConn(ep.host, ep.port)
    c.api_versions()
    result = c.login_plain(*ep.user)
    assert result.session_lifetime_ms == LIFETIME_MS, result
    return c


def test_session_lifetime_is_the_configured_maximum(endpoint):
    """SaslAuthenticate v1 carries SessionLifetimeMs = connections.max.reauth.ms for a password login."""
    with endpoint.counts(successful_authentication=1), _login(endpoint) as c:
        assert len(c.metadata_v1()) == 1


def test_reauthentication_renews_the_session(endpoint):
    """Re-authenticating at 3.5 s moves the expiry: at 7 s after the first login (2 s past the first
    expiry) the connection still serves Metadata."""
    with endpoint.counts(successful_authentication=1, successful_reauthentication=1), _login(endpoint) as c:
        time.sleep(3.5)
        assert c.login_plain(*endpoint.user).session_lifetime_ms == LIFETIME_MS
        time.sleep(3.5)
        assert len(c.metadata_v1()) == 1


def test_reauthentication_as_another_principal_is_refused_and_closed(endpoint):
    with endpoint.counts(successful_authentication=1, failed_reauthentication=1), _login(endpoint) as c:
        time.sleep(1.1)
        error, _ = c.sasl_handshake("PLAIN")
        assert error == ERROR_NONE
        other, password = endpoint.other_user
        result = c.sasl_authenticate_v1(plain_token(other, password))
        assert result.error == ERROR_SASL_AUTHENTICATION_FAILED, result
        # Kafka's wording, with principals as type.name.
        assert result.message == (
            f"Cannot change principals during re-authentication from User.{endpoint.user[0]}: User.{other}"
        ), result
        assert c.wait_closed(timeout=5) == b""


def test_reauthentication_with_another_mechanism_gets_a_handshake_then_a_close(endpoint):
    """Kafka's quirk: the handshake for another enabled mechanism succeeds; the next SaslAuthenticate
    gets no response and the connection is closed after the failed-authentication delay."""
    with endpoint.counts(successful_authentication=1, failed_reauthentication=1), _login(endpoint) as c:
        time.sleep(1.1)
        error, mechanisms = c.sasl_handshake("SCRAM-SHA-512")
        assert error == ERROR_NONE, mechanisms
        c.send_raw(request(API_SASL_AUTHENTICATE, 1, 4242, byte_array(b"n,,n=alice,r=0123456789abcdef")))
        started = time.monotonic()
        assert c.wait_closed(timeout=5) == b"", "a SaslAuthenticate response was sent"
        assert time.monotonic() - started < 3


def test_second_handshake_within_a_second_gets_illegal_sasl_state(endpoint):
    """A re-authentication, then another SaslHandshake at once: ILLEGAL_SASL_STATE, and the
    connection stays usable."""
    with endpoint.counts(successful_authentication=1, successful_reauthentication=1), _login(endpoint) as c:
        time.sleep(1.1)
        assert c.login_plain(*endpoint.user).session_lifetime_ms == LIFETIME_MS
        error, _ = c.sasl_handshake("PLAIN")
        assert error == ERROR_ILLEGAL_SASL_STATE
        assert len(c.metadata_v1()) == 1


def test_reauthentication_right_after_the_first_login(endpoint):
    """Kafka's one-second rule counts from the previous *re*-authentication: a handshake straight after
    the first login starts a re-authentication (KafkaChannel's lastReauthenticationStartNanos is 0
    until the first one)."""
    with endpoint.counts(successful_authentication=1, successful_reauthentication=1), _login(endpoint) as c:
        assert c.login_plain(*endpoint.user).session_lifetime_ms == LIFETIME_MS
        assert len(c.metadata_v1()) == 1


def test_request_after_expiry_closes_the_connection_silently(endpoint):
    with endpoint.counts(successful_authentication=1, expired_connections_killed=1), _login(endpoint) as c:
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        c.send_raw(c.metadata_v1_raw(77))
        assert c.wait_closed(timeout=5) == b"", "an expired session got a response"


def test_request_after_expiry_does_not_lose_the_earlier_responses(endpoint, kafka_env, unique):
    """A Fetch parked by the broker (empty partition, 2 s max wait) is in flight when the session
    expires, and a Metadata request follows after the expiry. Kafka reads one request at a time per
    connection, so the Fetch is answered before the Metadata is even looked at; then the connection
    closes. A gateway that closed at once would drop the Fetch response, and a producer in the same
    spot would resend a Produce that was already written: a duplicate record (seen with kafka-python)."""
    topic = unique("reauth-parked-fetch")
    user, password = endpoint.user
    confluent_create_topic({"bootstrap.servers": f"{endpoint.host}:{endpoint.port}",
                            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                            "sasl.username": user, "sasl.password": password, "log_level": 3},
                           topic, partitions=1)
    with endpoint.counts(successful_authentication=1, expired_connections_killed=1), _login(endpoint) as c:
        logged_in = time.monotonic()
        time.sleep(LIFETIME_MS / 1000 - 1.0)
        c.send_raw(c.fetch_v4_raw(501, topic, max_wait_ms=2500))
        time.sleep(logged_in + LIFETIME_MS / 1000 + 0.3 - time.monotonic())
        c.send_raw(c.metadata_v1_raw(502))
        try:
            first = c.recv_correlation_id()
        except Closed as e:
            raise AssertionError("the connection closed without answering the Fetch sent before expiry") from e
        assert first == 501, f"first response has correlation id {first}"
        assert c.wait_closed(timeout=5) == b"", "the request sent after expiry got a response"


def test_reauthentication_after_expiry_is_accepted(endpoint):
    """A SaslHandshake starts a re-authentication even when the session has already expired."""
    with endpoint.counts(successful_authentication=1, successful_reauthentication=1), _login(endpoint) as c:
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        assert c.login_plain(*endpoint.user).session_lifetime_ms == LIFETIME_MS
        assert len(c.metadata_v1()) == 1


# --------------------------------------------------------------------------------------------------
# Client tests (Portcullis only: they read Portcullis' counters). They come last in the file: the
# runs start with the module, so the wire tests above run while the clients produce.


@pytest.mark.portcullis_only
@pytest.mark.long
def test_java_producer_reauthenticates_every_connection(background_runs):
    """kafka-clients 4.4, SCRAM-SHA-512, 100 records/s for 60 s with a 5 s session lifetime, and a
    consumer reading the topic at the same time (its Fetch requests are parked by the broker for up to
    500 ms, so re-authentication meets requests in flight)."""
    res = background_runs.result("java")
    _report("java", res)
    p, cm = res.produced, res.produced["client_metrics"]
    consumed = p["consumer"]
    assert p["ok"] is True and p["failed"] == 0 and p["acked"] == p["sent"], f"{p}\n{res.extra['stderr']}"
    assert p["sent"] >= LONG_RUN_S * 100 * 0.8, p
    assert cm["record-error-total"] == 0 and cm["record-retry-total"] == 0, cm
    assert consumed["ok"] is True and consumed["distinct"] == p["sent"], consumed
    ccm = consumed["client_metrics"]
    assert cm["failed-reauthentication-total"] == 0 and ccm["failed-reauthentication-total"] == 0, p
    _assert_reauthenticated_throughout(res, LONG_RUN_S)
    # The clients' own count: the producer's and the consumer's broker connections are the only ones
    # that live past 5 s.
    client_reauths = cm["successful-reauthentication-total"] + ccm["successful-reauthentication-total"]
    assert client_reauths >= MIN_REAUTHS_PER_CONNECTION * len(_long_lived(res, LONG_RUN_S)), p
    assert res.metrics["successful_reauthentication"] >= client_reauths, (res.metrics, p)
    assert res.readback["ok"] is True, res.readback


@pytest.mark.portcullis_only
@pytest.mark.long
def test_confluent_producer_reauthenticates_every_connection(background_runs):
    """librdkafka 2.16, SCRAM-SHA-256 (re-authentication on by the per-mechanism table), 100 records/s
    for 60 s with a 5 s session lifetime, and a consumer reading the topic at the same time."""
    res = background_runs.result("confluent")
    _report("confluent", res)
    p = res.produced
    assert p["failed"] == 0 and p["not_flushed"] == 0, p
    assert p["sent"] >= LONG_RUN_S * 100 * 0.8, p
    consumed = res.extra["consumer"]
    assert consumed == {"finished": True, "distinct": p["sent"], "duplicates": 0, "wrong_values": 0,
                        "errors": []}, consumed
    _assert_reauthenticated_throughout(res, LONG_RUN_S)
    handles = [*res.extra["producer_brokers"].items(), *res.extra["consumer_brokers"].items()]
    brokers = [b for _, b in handles]
    # librdkafka keeps a separate handle for the group coordinator, which it connects now and then
    # and closes after 3 s idle; those connections end before any session could expire (no kill).
    assert brokers and all(b["disconnects"] == 0 for name, b in handles if name != "GroupCoordinator"), res.extra
    # librdkafka's count: each SaslHandshake beyond the first on a connection is a re-authentication.
    client_reauths = sum(b["handshakes"] - b["connects"] for b in brokers)
    assert client_reauths >= MIN_REAUTHS_PER_CONNECTION * len(_long_lived(res, LONG_RUN_S)), res.extra
    assert res.metrics["successful_reauthentication"] >= client_reauths, (res.metrics, res.extra)
    assert res.readback == {**res.readback, "expected": p["sent"], "distinct": p["sent"], "duplicates": 0,
                            "redelivered": 0, "missing": 0, "wrong_values": 0, "unexpected": 0}, res.readback
    # The per-mechanism table turned re-authentication on for SCRAM-SHA-256 only: PLAIN sessions
    # have no lifetime, and a second handshake is refused as on a session without expiry.
    gw = background_runs.gateways["confluent"]
    with ReauthConn(gw.host, gw.port) as c:
        c.api_versions()
        assert c.login_plain(*gw.user("alice")).session_lifetime_ms == 0
        time.sleep(1.1)
        assert c.sasl_handshake("PLAIN")[0] == ERROR_ILLEGAL_SASL_STATE


@pytest.mark.portcullis_only
@pytest.mark.long
def test_kafka_python_is_cut_off_after_expiry_and_reconnects(background_runs):
    """kafka-python 2.3 (SaslAuthenticate v0, never re-authenticates) for 20 s: each connection is
    closed at its first request after the 5 s lifetime; the client reconnects and retries, and every
    record arrives exactly once (a request on an expired session is dropped, never forwarded)."""
    res = background_runs.result("kafka_python")
    _report("kafka_python", res)
    p, m, before = res.produced, res.metrics, res.extra["before"]
    seen = f"metrics {m} (before {before}); connections {describe(res.connections)}"
    assert p["failed"] == 0, p
    killed = m["expired_connections_killed"] - before["expired_connections_killed"]
    assert killed >= 2, f"expected the expired connections to be killed: {seen}"
    assert m["successful_reauthentication"] == before["successful_reauthentication"], seen
    assert m["failed_authentication"] == 0 and m["failed_reauthentication"] == 0, seen
    # It reconnected after each kill: at least one new authentication per kill.
    assert m["successful_authentication"] - before["successful_authentication"] >= killed + 1, seen
    # No connection outlived its session by more than the time to its next request.
    assert all(c.lifetime < LIFETIME_MS / 1000 + 3 for c in res.connections), seen
    assert res.readback == {**res.readback, "expected": p["sent"], "distinct": p["sent"], "duplicates": 0,
                            "redelivered": 0, "missing": 0, "wrong_values": 0, "unexpected": 0}, res.readback
