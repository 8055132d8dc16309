"""Incremental fetch sessions (KIP-227) through a Portcullis with the `acl` authorizer.

Portcullis lets a client's fetch session reach the broker and mirrors it per connection, so that
authorization covers the partitions the broker serves without the request listing them
(framework/src/authorization/fetch.rs). Seen from Portcullis' side through its debug log
(`portcullis::authorization::fetch`): "fetch session opened" when the broker's response to an
opening fetch names a session (a sessionless rewrite would get session id 0, and no such line),
"incremental fetch forwarded" for each incremental fetch passed on. The raw-wire tests show the
same on the bytes: records served from a session the request does not list, another connection's
session id refused with FETCH_SESSION_ID_NOT_FOUND.

librdkafka (confluent-kafka) sends sessionless fetches (session id 0, epoch -1) and must keep
working; kafka-python 2.3 and Kafka's Java consumer use sessions.
"""

from __future__ import annotations

import json
import re
import struct
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import TopicAuthorizationFailedError

from clients import confluent_conf, confluent_create_topic, confluent_produce, kafka_python_conf
from kafka_wire import Conn, Reader, string
from test_differential import PORTCULLIS_ACL_USERS, start_portcullis_with_authorizer
from test_java import client_props

pytestmark = pytest.mark.portcullis_only

API_FETCH = 1
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
TOPIC_AUTHORIZATION_FAILED = 29

OPENED = re.compile(r"fetch session opened.*session_id=(-?\d+)")
INCREMENTAL = re.compile(r"incremental fetch forwarded.*session_id=(-?\d+) epoch=(-?\d+)")


@pytest.fixture(scope="module")
def node(run_dir):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUST_LOG", "info,portcullis::authorization::fetch=debug")
        p = start_portcullis_with_authorizer(run_dir, name="fetch-sessions")
    yield p
    p.stop()


def gateway(node) -> SimpleNamespace:
    return SimpleNamespace(bootstrap=node.bootstrap, security_protocol="SASL_PLAINTEXT", ca_file=None)


def conf(node, user: str) -> dict:
    return confluent_conf(gateway(node), "SCRAM-SHA-512", user, PORTCULLIS_ACL_USERS[user])


def acl(topic: str, user: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)


def grant_read(node, topic: str, user: str, group: str | None = None) -> None:
    bindings = [acl(topic, user)]
    if group is not None:
        bindings.append(AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, f"User:{user}", "*",
                                   AclOperation.READ, AclPermissionType.ALLOW))
    admin = AdminClient(conf(node, "admin"))  # kept alive until the futures resolve
    for f in admin.create_acls(bindings, request_timeout=30).values():
        f.result(timeout=60)


def revoke_read(node, topic: str, user: str) -> None:
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)
    admin = AdminClient(conf(node, "admin"))
    for f in admin.delete_acls([flt], request_timeout=30).values():
        assert len(f.result(timeout=60)) == 1


def new_topic(node, unique, partitions: int = 2) -> str:
    topic = unique("fetch-sessions")
    confluent_create_topic(conf(node, "admin"), topic, partitions)
    return topic


def sessions_seen(node, offset: int) -> tuple[set[int], list[tuple[int, int]]]:
    """(session ids opened, (session id, epoch) of each incremental fetch) logged since `offset`."""
    log = node.log_since(offset, 10**7)
    opened = {int(m.group(1)) for m in OPENED.finditer(log)}
    incremental = [(int(m.group(1)), int(m.group(2))) for m in INCREMENTAL.finditer(log)]
    return opened, incremental


def assert_incremental_sessions(node, offset: int, who: str) -> None:
    opened, incremental = sessions_seen(node, offset)
    assert opened, f"{who}: no fetch session was opened upstream:\n{node.log_since(offset, 40)}"
    in_session = [(s, e) for s, e in incremental if s in opened]
    assert in_session and max(e for _, e in in_session) >= 2, (
        f"{who}: no incremental fetches in sessions {opened}: {incremental[:20]}")


def kafka_python_consumer(node, user: str, topic: str, partitions: int, also: tuple[str, ...] = ()) -> KafkaConsumer:
    """Assigned every partition of `topic` and of the topics `also` (with as many partitions)."""
    c = KafkaConsumer(**kafka_python_conf(gateway(node), "SCRAM-SHA-512", user, PORTCULLIS_ACL_USERS[user]),
                      enable_auto_commit=False, fetch_max_wait_ms=100)
    tps = [KpTopicPartition(t, p) for t in (topic, *also) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    return c


def poll_keys(c: KafkaConsumer, want: int, timeout: float = 60) -> set[str]:
    keys: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(keys) < want and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=200).values():
            keys.update(r.key.decode() for r in records)
    return keys


def test_kafka_python_consumes_in_an_incremental_session(node, unique):
    topic = new_topic(node, unique)
    grant_read(node, topic, "bob")
    admin = conf(node, "admin")
    sent = confluent_produce(admin, topic, 30)
    offset = node.log_size()
    c = kafka_python_consumer(node, "bob", topic, 2)
    try:
        assert poll_keys(c, 30) == set(sent)
        # More records while the session is open, in rounds: each is served by incremental fetches.
        p = Producer(admin)
        for round_ in range(3):
            more = {f"more-{round_}-{i}" for i in range(10)}
            for k in more:
                p.produce(topic, key=k.encode(), value=b"v")
            assert p.flush(30) == 0
            assert poll_keys(c, 10) == more, f"round {round_}"
    finally:
        c.close()
    assert_incremental_sessions(node, offset, "kafka-python")


def test_confluent_kafka_consumes_through_sessions_authorization(node, unique):
    """librdkafka fetches without sessions: the sessionless path still authorizes and serves."""
    topic = new_topic(node, unique)
    group = unique("fetch-sessions-group")
    grant_read(node, topic, "bob", group=group)
    sent = confluent_produce(conf(node, "admin"), topic, 40)
    c = Consumer({**conf(node, "bob"), "group.id": group, "enable.auto.commit": False})
    got: set[str] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(2)])
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.add(msg.key().decode())
    finally:
        c.close()
    assert got == set(sent)


def test_java_consumer_uses_incremental_sessions(node, unique, java, tmp_path):
    offset = node.log_size()
    props = client_props(tmp_path, gateway(node), "admin", PORTCULLIS_ACL_USERS["admin"])
    # Enough records for several fetches per partition (1 MiB each): the first one opens the
    # session, the others are incremental.
    r = java.run("RoundTrip", "roundtrip", str(props), unique("fetch-sessions-java"), "60000",
                 unique("fetch-sessions-java-group"), "classic")
    assert r.returncode == 0, f"RoundTrip failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["consumed_distinct"] == 60000
    assert_incremental_sessions(node, offset, "Java consumer")


def test_revoked_read_stops_a_polling_consumer(node, unique):
    topic = new_topic(node, unique)
    grant_read(node, topic, "bob")
    # A second topic, readable all along, keeps the session open while `topic` is denied (a
    # session left with nothing served is closed, and the client's full fetches then decide).
    kept = new_topic(node, unique)
    grant_read(node, kept, "bob")
    admin = conf(node, "admin")
    first = confluent_produce(admin, topic, 20)
    offset = node.log_size()
    c = kafka_python_consumer(node, "bob", topic, 2, also=(kept,))
    try:
        assert poll_keys(c, 20) == set(first)
        revoke_read(node, topic, "bob")
        # The consumer keeps polling: the next fetches of its session are answered
        # TOPIC_AUTHORIZATION_FAILED.
        denied = None
        deadline = time.monotonic() + 30
        while denied is None and time.monotonic() < deadline:
            try:
                c.poll(timeout_ms=200)
            except TopicAuthorizationFailedError as e:
                denied = e
        assert denied is not None, "no TOPIC_AUTHORIZATION_FAILED after the revocation"
        assert topic in str(denied)
        second = {f"late-{i}" for i in range(20)}
        p = Producer(admin)
        for k in second:
            p.produce(topic, key=k.encode(), value=b"v")
        assert p.flush(30) == 0
        late: set[str] = set()
        errors = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                for records in c.poll(timeout_ms=200).values():
                    late.update(r.key.decode() for r in records)
            except TopicAuthorizationFailedError:
                errors += 1
        assert not late, f"records arrived after READ was revoked: {sorted(late)[:5]}"
        assert errors > 0, "the revoked partitions stopped being answered denied"
        # READ granted again: as from Kafka's own broker, the same consumer (which does not list
        # the denied partitions again by itself) gets the records produced meanwhile. Portcullis
        # ends the session and the consumer opens a new one.
        grant_read(node, topic, "bob")
        deadline = time.monotonic() + 30
        while not second <= late and time.monotonic() < deadline:
            try:
                for records in c.poll(timeout_ms=200).values():
                    late.update(r.key.decode() for r in records)
            except TopicAuthorizationFailedError:
                pass  # fetches answered before the new ACL reached the node
        assert second <= late, f"{len(second - late)} of {len(second)} records not served after READ was granted again"
    finally:
        c.close()
    # The revocation happened inside a session (not by a new full fetch), and the grant ended it.
    log = node.log_since(offset, 10**7)
    assert re.search(r"incremental fetch forwarded.*revoked=[1-9]", log), node.log_since(offset, 60)
    assert "read granted again in a fetch session; ended" in log, node.log_since(offset, 60)


# --------------------------------------------------------------------------------------------------
# Raw wire: Fetch v7 (header v1, not flexible), written here from the protocol definition.


def fetch_v7(session_id: int, epoch: int, topics: list[tuple[str, list[tuple[int, int]]]],
             forgotten: list[tuple[str, list[int]]] = ()) -> bytes:
    body = struct.pack(">iiiib", -1, 200, 1, 1 << 20, 0) + struct.pack(">ii", session_id, epoch)
    body += struct.pack(">i", len(topics))
    for name, partitions in topics:
        body += string(name) + struct.pack(">i", len(partitions))
        for partition, offset in partitions:
            body += struct.pack(">iqqi", partition, offset, -1, 1 << 20)
    body += struct.pack(">i", len(forgotten))
    for name, partitions in forgotten:
        body += string(name) + struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return body


def fetch_response_v7(r: Reader) -> tuple[int, int, dict[tuple[str, int], list[tuple[int, int]]]]:
    """(error, session id, {(topic, partition): [(error, records bytes), ...]}): every entry the
    response has for a partition, in order (one, from a well-behaved broker)."""
    r.int32()  # throttle
    error = r.int16()
    session = r.int32()
    partitions = {}

    def partition(x: Reader, topic: str):
        index = x.int32()
        code = x.int16()
        x.int64(), x.int64(), x.int64()  # high watermark, last stable offset, log start offset
        x.array(lambda y: (y.int64(), y.int64()))  # aborted transactions
        records = x.bytes_()
        partitions.setdefault((topic, index), []).append((code, len(records or b"")))

    for _ in range(r.int32()):
        topic = r.string()
        for _ in range(r.int32()):
            partition(r, topic)
    return error, session, partitions


def raw_fetch(conn: Conn, *args, **kwargs):
    return fetch_response_v7(conn.call(API_FETCH, 7, fetch_v7(*args, **kwargs)))


def test_raw_sessions_are_served_and_tied_to_their_connection(node, unique):
    topic = new_topic(node, unique, partitions=1)
    kept = new_topic(node, unique, partitions=1)
    grant_read(node, topic, "bob")
    grant_read(node, kept, "bob")
    admin = conf(node, "admin")
    confluent_produce(admin, topic, 5)
    with Conn("127.0.0.1", node.listener_port) as a, Conn("127.0.0.1", node.listener_port) as b:
        a.authenticate_plain("bob", PORTCULLIS_ACL_USERS["bob"])
        b.authenticate_plain("bob", PORTCULLIS_ACL_USERS["bob"])
        # Opening: the broker's session id comes back (a sessionless rewrite would give 0).
        error, session, parts = raw_fetch(a, 0, 0, [(topic, [(0, 5)]), (kept, [(0, 0)])])
        assert error == 0 and session != 0, (error, session)
        # Another connection may not use it, whatever the epoch; the refusal is local.
        for epoch in (1, 2):
            error, got, parts = raw_fetch(b, session, epoch, [])
            assert (error, got, parts) == (FETCH_SESSION_ID_NOT_FOUND, 0, {}), (epoch, error, got, parts)
        # The owner: a wrong epoch is refused, the right one is served from the session.
        error, got, _ = raw_fetch(a, session, 5, [])
        assert (error, got) == (INVALID_FETCH_SESSION_EPOCH, 0)
        confluent_produce(admin, topic, 3)
        records = 0
        epoch = 1
        deadline = time.monotonic() + 20
        while records == 0 and time.monotonic() < deadline:
            error, got, parts = raw_fetch(a, session, epoch, [])
            assert (error, got) == (0, session), (epoch, error, got)
            epoch += 1
            [(code, records)] = parts.get((topic, 0), [(0, 0)])
            assert code == 0
        assert records > 0, "the session's partition was not served without being listed"
        # Revoked: forgotten upstream, answered denied on this and every later fetch of the session,
        # which goes on serving the other topic.
        revoke_read(node, topic, "bob")
        for _ in range(3):
            error, got, parts = raw_fetch(a, session, epoch, [])
            epoch += 1
            assert (error, got) == (0, session), (error, got)
            # Exactly one entry: a broker still serving the partition would add one with records.
            assert parts.get((topic, 0)) == [(TOPIC_AUTHORIZATION_FAILED, 0)], parts
        confluent_produce(admin, topic, 3)
        error, got, parts = raw_fetch(a, session, epoch, [])
        epoch += 1
        assert parts.get((topic, 0)) == [(TOPIC_AUTHORIZATION_FAILED, 0)], parts
        # Granted again: the session ends (the broker forgot the partition and only the client
        # knows its position); a new one listing it is served.
        grant_read(node, topic, "bob")
        error, got, parts = raw_fetch(a, session, epoch, [])
        assert (error, got, parts) == (FETCH_SESSION_ID_NOT_FOUND, 0, {}), (error, got, parts)
        error, session, parts = raw_fetch(a, 0, 0, [(topic, [(0, 0)]), (kept, [(0, 0)])])
        assert error == 0 and session != 0, (error, session)
        [(code, records)] = parts.get((topic, 0), [(0, 0)])
        assert code == 0 and records > 0, parts
