"""How Portcullis closes a client connection: every answer it wrote reaches the client before the
end of the connection, and nothing acknowledged is written twice (issue 7 §1).

The duplicate this guards against (seen once in a fresh-clone run of test_reauth.py): a session
expires while a kafka-python 2.x producer has Produce requests in flight. Portcullis answered the
ones it had forwarded and closed right after the last answer. Two things then went wrong:

- the close came with unread pipelined requests in the socket, so the kernel sent a reset, which
  throws away whatever of the answers was still in the send queue (a 12 MB Fetch is cut at ~10 MB
  on loopback: `test_answers_in_flight_survive_a_close_with_unread_requests`);
- kafka-python 2.x's `BrokerConnection._recv` throws away every byte of a read that ends in EOF,
  so answers that arrive together with the FIN are lost; the producer resends a Produce that was
  appended: a duplicate (`test_kafka_python_never_duplicates_across_session_expiries`).

Portcullis now closes lingering: no FIN sooner than 300 ms after the last answer (input read and
discarded meanwhile), then FIN, then input read until the client closes.

STRESS_ROUNDS (default 3) sets how many producer runs the stress test makes; the issue's proof
used 50 (`STRESS_ROUNDS=50 scripts/test.sh --interop-only --no-quickstart -- -k never_duplicates`).
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer

from clients import confluent_conf, confluent_create_topic, kafka_python_conf
from conftest import PORTCULLIS_USERS, _portcullis_gateway
from kafka_wire import API_METADATA, Closed, request, string
from reauth_support import ReauthConn, start_portcullis

pytestmark = pytest.mark.portcullis_only

API_FETCH = 1
STRESS_ROUNDS = int(os.environ.get("STRESS_ROUNDS", "3"))
STRESS_SECONDS = float(os.environ.get("STRESS_SECONDS", "6"))


def _fetch_v4(correlation_id: int, topic: str, max_wait_ms: int, min_bytes: int, max_bytes: int) -> bytes:
    """Fetch v4 of partition 0 from offset 0: the broker holds it up to `max_wait_ms` until
    `min_bytes` are available, and answers with up to `max_bytes`."""
    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, max_bytes)
    return request(API_FETCH, 4, correlation_id, body)


def _read_until_end(sock: socket.socket, timeout: float) -> tuple[int, str]:
    """Reads everything until EOF or a reset; returns (bytes read, how it ended)."""
    sock.settimeout(timeout)
    total = 0
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return total, "reset"
        except socket.timeout:
            return total, "timeout"
        if not chunk:
            return total, "eof"
        total += len(chunk)


@pytest.fixture(scope="module")
def short_sessions(launcher, kafka_env):
    """A Portcullis whose sessions last 3 s."""
    p, metrics = start_portcullis(launcher, "close-discipline", listener={"connections_max_reauth_ms": 3000})
    return p, metrics


def test_answers_in_flight_survive_a_close_with_unread_requests(short_sessions, kafka_env, unique):
    """A 12 MB Fetch parked by the broker when the session expires, a request after the expiry
    (which ends the session) and one more request that Portcullis never reads: the client must
    still receive the whole Fetch answer, then a clean EOF, never a reset."""
    p, _ = short_sessions
    gw = _portcullis_gateway("close", p, kafka_env, "SASL_PLAINTEXT", None)
    user, password = gw.user("alice")
    topic = unique("close-big")
    conf = confluent_conf(gw, "SCRAM-SHA-512", user, password)
    confluent_create_topic(conf, topic, partitions=1)
    producer = Producer({**conf, "acks": "all", "linger.ms": 20, "message.max.bytes": 1_000_000})
    value = b"x" * 500_000
    for i in range(24):  # 12 MB in partition 0
        producer.produce(topic, key=str(i).encode(), value=value, partition=0)
    assert producer.flush(60) == 0

    host, port = gw.broker_addresses[1].rsplit(":", 1)
    c = ReauthConn(host, int(port), timeout=30)
    try:
        c.api_versions()
        lifetime = c.login_plain(user, password).session_lifetime_ms
        assert lifetime == 3000, lifetime
        logged_in = time.monotonic()
        c.metadata_v1()  # opens the upstream connection
        # Parked by the broker for 2.5 s (it waits for 64 MB that never come), answered with 12 MB.
        time.sleep(1.5)
        c.send_raw(_fetch_v4(101, topic, max_wait_ms=2500, min_bytes=64 << 20, max_bytes=16 << 20))
        # After the expiry: this request ends the session (it is never answered) ...
        time.sleep(max(0.0, logged_in + lifetime / 1000 + 0.3 - time.monotonic()))
        c.send_raw(request(API_METADATA, 1, 102, struct.pack(">i", -1)))
        # ... and this one is never read: Portcullis has stopped reading.
        time.sleep(0.3)
        c.send_raw(request(API_METADATA, 1, 103, struct.pack(">i", -1)))
        # Read slowly: Portcullis' last write completes once the client has taken about 2 MB
        # (loopback buffers hold about 10 MB), so it closes while the end of the answer is still
        # in its send queue, which a reset would throw away.
        time.sleep(2.0)
        (size,) = struct.unpack(">i", c._recv_exact(4))
        assert size > 11_000_000, size
        head = len(c._recv_exact(3_000_000))
        time.sleep(2.0)
        rest, how = _read_until_end(c.sock, timeout=15)
        total = head + rest
    finally:
        c.close()
    print(f"fetch answer {size} bytes; read {total} after its size prefix, then {how}")
    assert (total, how) == (size, "eof"), f"expected the whole {size}-byte answer then EOF, got {total} then {how}"


def _kafka_python_round(gw, topic: str, seconds: float) -> dict:
    """A non-idempotent kafka-python producer (5 requests in flight, acks=all) writes as fast as it
    can for `seconds` across several session expiries; every record is then read back."""
    user, password = gw.user("alice")
    setup = confluent_conf(gw, "SCRAM-SHA-512", user, password)
    confluent_create_topic(setup, topic, partitions=1)
    producer = KafkaProducer(acks="all", linger_ms=1, max_in_flight_requests_per_connection=5,
                             **kafka_python_conf(gw, "SCRAM-SHA-512", user, password))
    sent = 0
    futures = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            futures.append(producer.send(topic, key=str(sent).encode(), value=b"v" * 100))
            sent += 1
            if sent % 200 == 0:
                time.sleep(0.001)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    failed = 0
    for f in futures:
        try:
            f.get(timeout=30)
        except Exception:  # noqa: BLE001 - counted
            failed += 1
    return {"sent": sent, "failed": failed, **_read_back(setup, topic, sent)}


def _read_back(conf: dict, topic: str, sent: int) -> dict:
    c = Consumer({**conf, "group.id": f"{topic}-readback", "enable.auto.commit": False})
    seen: dict[int, int] = {}
    try:
        tp = TopicPartition(topic, 0, 0)
        end = c.get_watermark_offsets(tp, timeout=30)[1]
        c.assign([tp])
        read = 0
        deadline = time.monotonic() + 60
        while read < end and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            read += 1
            key = int(msg.key())
            seen[key] = seen.get(key, 0) + 1
    finally:
        c.close()
    duplicates = {k: n for k, n in seen.items() if n > 1}
    missing = [k for k in range(sent) if k not in seen]
    return {"stored": sum(seen.values()), "duplicates": len(duplicates),
            "first_duplicates": dict(list(duplicates.items())[:5]), "missing": len(missing)}


def test_kafka_python_never_duplicates_across_session_expiries(short_sessions, kafka_env, unique):
    """kafka-python 2.x (which loses answers that arrive with the FIN) producing flat out through
    sessions that expire every 3 s: no record is stored twice, none is lost."""
    p, _ = short_sessions
    gw = _portcullis_gateway("close", p, kafka_env, "SASL_PLAINTEXT", None)
    rounds = []
    for i in range(STRESS_ROUNDS):
        result = _kafka_python_round(gw, unique(f"close-kp-{i}"), STRESS_SECONDS)
        print(f"round {i}: {result}")
        rounds.append(result)
    duplicated = sum(r["duplicates"] for r in rounds)
    print(f"{len(rounds)} rounds, {sum(r['sent'] for r in rounds)} records, {duplicated} duplicated")
    assert all(r["failed"] == 0 and r["missing"] == 0 for r in rounds), rounds
    assert duplicated == 0, [r for r in rounds if r["duplicates"]]
