"""A dead, restarted or unreachable upstream (issue 7 §2, §3, §6), against a Kafka broker of this
module's own (own_kafka.py), which the tests kill and restart.

- A broker that goes away closes every client connection to its Portcullis port at once, also an
  idle one (Portcullis watches each upstream socket at all times).
- A client that connects while the upstream is down gets an answer or a close promptly, and the
  log names the upstream; a node started while the upstream is down refuses connections (instead
  of accepting and never answering) until the upstream answers.
- Kafka killed and restarted under an idempotent producer: every acknowledged record is read back
  exactly once.

The tests run in file order and each leaves the broker running.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from clients import confluent_conf, confluent_create_topic
from conftest import PORTCULLIS_USERS, PortcullisProcess, _portcullis_gateway, free_port_pair, wait_for_port
from kafka_wire import Closed
from own_kafka import OwnKafka
from reauth_support import ReauthConn, start_portcullis

pytestmark = pytest.mark.portcullis_only


@pytest.fixture(scope="module")
def own_kafka(run_dir):
    k = OwnKafka(run_dir / "kafka-faults")
    k.start()
    yield k
    k.stop()


@pytest.fixture(scope="module")
def gateway_on_own_kafka(launcher, own_kafka, kafka_env):
    p, _ = start_portcullis(launcher, "faults", upstream={
        "bootstrap_servers": [own_kafka.bootstrap], "security_protocol": "PLAINTEXT",
        "connect_timeout_ms": 5000})
    gw = _portcullis_gateway("faults", p, kafka_env, "SASL_PLAINTEXT", None)
    gw.hidden_ports = {int(own_kafka.bootstrap.rsplit(":", 1)[1])}
    return gw


def _idle_broker_connection(gw) -> ReauthConn:
    """An authenticated connection to broker 1's Portcullis port whose upstream is open (a Metadata
    request was answered) and which then sends nothing."""
    host, port = gw.broker_addresses[1].rsplit(":", 1)
    c = ReauthConn(host, int(port), timeout=10)
    c.api_versions()
    c.login_plain("alice", PORTCULLIS_USERS["alice"])
    c.metadata_v1()
    return c


def _seconds_until_closed(c: ReauthConn, since: float, timeout: float) -> float:
    """Waits for EOF or a reset on `c`; returns how long after `since` it came."""
    deadline = since + timeout
    while True:
        c.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if c.sock.recv(4096) == b"":
                return time.monotonic() - since
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - since
        except socket.timeout:
            raise AssertionError(f"the connection was still open {timeout}s after the broker died") from None


def test_an_idle_client_connection_closes_at_once_when_its_broker_dies(gateway_on_own_kafka, own_kafka):
    gw = gateway_on_own_kafka
    idle = [_idle_broker_connection(gw) for _ in range(3)]
    # Idle for longer than limits.close_pause_ms (1 s), so no recent answer delays the close.
    time.sleep(2.0)
    try:
        died = own_kafka.kill()
        waits = [_seconds_until_closed(c, died, timeout=10) for c in idle]
    finally:
        for c in idle:
            c.close()
        own_kafka.relaunch()
    print(f"client connections closed {[round(w, 3) for w in waits]} s after the broker died")
    assert max(waits) < 1.0, waits
    # The restarted broker is served through the same port.
    deadline = time.monotonic() + 30
    while True:
        try:
            c = _idle_broker_connection(gw)
            c.close()
            break
        except (Closed, OSError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_client_is_closed_promptly_while_the_upstream_is_down(gateway_on_own_kafka, own_kafka):
    """Authentication is Portcullis' own; the first forwarded request finds the upstream down: the
    connection is closed (no silence), and the log says which upstream."""
    gw = gateway_on_own_kafka
    log_from = gw.process.log_size()
    own_kafka.kill()
    try:
        c = ReauthConn(gw.host, gw.port, timeout=10)
        c.api_versions()
        c.login_plain("alice", PORTCULLIS_USERS["alice"])
        started = time.monotonic()
        with pytest.raises(Closed):
            c.metadata_v1()
        took = time.monotonic() - started
        c.close()
    finally:
        own_kafka.relaunch()
    log = gw.process.log_since(log_from, 50)
    print(f"closed {took:.3f}s after the request; log:\n{log}")
    assert took < 5.0 + 1.0, took  # connect_timeout_ms = 5000, and a refused connect is immediate
    assert own_kafka.bootstrap in log and "closing client connection" in log, log


def test_a_node_refuses_connections_until_the_upstream_answers(launcher, own_kafka):
    """Started while the upstream is down, a node does not accept connections it could not serve:
    a client's connect is refused (it retries, as with a broker that is not up), the log names the
    upstream, and once the upstream answers the node serves."""
    own_kafka.kill()
    workdir = launcher.run_dir / "portcullis-upstream-down"
    workdir.mkdir()
    (workdir / "plugins").mkdir()
    p = PortcullisProcess(launcher.binary, workdir, "upstream-down")
    p.write_config(upstream={"bootstrap_servers": [own_kafka.bootstrap], "security_protocol": "PLAINTEXT"},
                   tls=None, plugin_dir=workdir / "plugins")
    for user, password in PORTCULLIS_USERS.items():
        p.scram_add(user, password, "SCRAM-SHA-512")
    p.start(wait=False)  # its ports stay closed: nothing to wait for
    launcher.processes.append(p)
    try:
        time.sleep(3.0)
        assert p.alive(), p.log_tail()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p.listener_port), timeout=2).close()
        log = p.log_tail(30)
        assert "cannot reach the upstream cluster" in log and own_kafka.bootstrap in log, log
    finally:
        own_kafka.relaunch()
    wait_for_port("127.0.0.1", p.listener_port, 30, p.proc)
    c = ReauthConn("127.0.0.1", p.listener_port, timeout=10)
    try:
        c.api_versions()
        c.login_plain("alice", PORTCULLIS_USERS["alice"])
        assert c.metadata_v1(), "no broker in Metadata"
    finally:
        c.close()


def test_kafka_killed_and_restarted_under_a_producer_loses_nothing(gateway_on_own_kafka, own_kafka, unique):
    """An idempotent librdkafka producer writes through Portcullis while the broker is killed
    (SIGKILL) and restarted twice: every acknowledged record is stored exactly once."""
    gw = gateway_on_own_kafka
    user, password = gw.user("alice")
    conf = confluent_conf(gw, "SCRAM-SHA-512", user, password)
    topic = unique("faults-kill")
    confluent_create_topic(conf, topic, partitions=1)
    acked: set[int] = set()
    failed: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked.add(int(msg.key()))
        else:
            failed.append(str(err))

    def produce():
        p = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                      "message.timeout.ms": 120000})
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, key=str(i).encode(), value=b"x" * 64, partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            time.sleep(0.0005)
        p.flush(120)

    t = threading.Thread(target=produce, name="faults-producer")
    t.start()
    try:
        for _ in range(2):
            time.sleep(3.0)
            own_kafka.kill()
            time.sleep(1.0)
            own_kafka.relaunch()
        time.sleep(3.0)
    finally:
        stop.set()
        t.join(timeout=180)
    assert not t.is_alive(), "the producer did not finish"
    counts = _read_all(conf, topic)
    duplicated = {k: n for k, n in counts.items() if n > 1}
    lost = sorted(acked - counts.keys())
    print(f"acknowledged {len(acked)}, stored {sum(counts.values())}, duplicated {len(duplicated)}, "
          f"lost {len(lost)}, delivery failures {len(failed)}")
    assert len(acked) > 1000, len(acked)
    assert not lost, lost[:10]
    assert not duplicated, dict(list(duplicated.items())[:10])


def _read_all(conf: dict, topic: str) -> dict[int, int]:
    c = Consumer({**conf, "group.id": f"{topic}-readback", "enable.auto.commit": False})
    counts: dict[int, int] = {}
    try:
        tp = TopicPartition(topic, 0, 0)
        end = c.get_watermark_offsets(tp, timeout=30)[1]
        c.assign([tp])
        read = 0
        deadline = time.monotonic() + 90
        while read < end and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            read += 1
            key = int(msg.key())
            counts[key] = counts.get(key, 0) + 1
    finally:
        c.close()
    return counts
