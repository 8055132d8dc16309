"""Large Fetch responses through Portcullis arrive whole, in order, byte for byte (issue 9).

A Fetch response that needs no change is relayed as its bytes arrive (host/src/server/relay.rs):
Portcullis passes on whatever part of it each read brought, and nothing but the relay's own
count says where the response ends and the next begins. These tests consume megabytes of
distinct random records with two client libraries, each with a small socket receive buffer (the
client takes the bytes in small pieces, so the relay's writes stall and resume often), over
plain TCP and over TLS, and compare every record with what was produced. On plain TCP the rest of
each large response is spliced socket to socket (host/src/server/splice.rs); one test checks from
the relay's counter that this path is the one taken.
"""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer, TopicPartition as KpTopicPartition

from clients import confluent_conf, confluent_create_topic, kafka_python_conf
from conftest import PORTCULLIS_USERS, Gateway
from prometheus import scrape, total
from reauth_support import start_portcullis

# The relay's byte counter (`portcullis.relayed`, unit bytes, by path) as Prometheus names it.
RELAYED = "portcullis_relayed_bytes_total"

RECORDS = 1500
RECORD_SIZE = 8 * 1024  # 1500 × 8 KiB ≈ 12 MiB in one partition


@pytest.fixture(scope="module")
def records(gateway) -> tuple[str, list[bytes]]:
    """One topic of one partition holding RECORDS distinct random values, produced through the gateway."""
    user, password = gateway.user("alice")
    conf = confluent_conf(gateway, "SCRAM-SHA-512", user, password)
    topic = f"relay-{os.getpid()}-{time.time_ns()}"
    confluent_create_topic(conf, topic, partitions=1)
    values = [os.urandom(RECORD_SIZE) for _ in range(RECORDS)]
    failures: list[str] = []
    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "compression.type": "none"})
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=value,
                                 on_delivery=lambda err, _m: failures.append(str(err)) if err else None)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0, "records not delivered within 60 s"
    assert not failures, failures[:3]
    return topic, values


def digest(values: list[bytes]) -> list[str]:
    return [hashlib.sha256(v).hexdigest()[:16] for v in values]


def confluent_read_all(gateway: Gateway, topic: str, expected: int) -> list[tuple[int, bytes, bytes]]:
    user, password = gateway.user("alice")
    consumer = Consumer({
        **confluent_conf(gateway, "SCRAM-SHA-512", user, password),
        "group.id": f"relay-{time.time_ns()}",
        "enable.auto.commit": False,
        # Large responses: up to 4 MiB from the partition per Fetch.
        "fetch.max.bytes": 16 * 1024 * 1024,
        "max.partition.fetch.bytes": 4 * 1024 * 1024,
        # The client takes bytes in small pieces: the relay's writes to it stall often.
        "socket.receive.buffer.bytes": 16 * 1024,
    })
    got: list[tuple[int, bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 90
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def kafka_python_read_all(gateway: Gateway, topic: str, expected: int) -> list[tuple[int, bytes, bytes]]:
    user, password = gateway.user("alice")
    consumer = KafkaConsumer(
        **kafka_python_conf(gateway, "SCRAM-SHA-512", user, password),
        enable_auto_commit=False,
        fetch_max_bytes=16 * 1024 * 1024,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        receive_buffer_bytes=16 * 1024,
    )
    got: list[tuple[int, bytes, bytes]] = []
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 90
        while len(got) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend((r.offset, r.key, r.value) for r in batch)
    finally:
        consumer.close()
    return got


def check(got: list[tuple[int, bytes, bytes]], values: list[bytes]) -> None:
    offsets = [o for o, _, _ in got]
    assert offsets == list(range(len(values))), (
        f"{len(got)} records, offsets not 0..{len(values) - 1} in order "
        f"(first differences: {[(i, o) for i, o in enumerate(offsets) if o != i][:5]})")
    assert [k for _, k, _ in got] == [str(i).encode() for i in range(len(values))]
    assert digest([v for _, _, v in got]) == digest(values), "a record's value changed on the way"


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_large_fetch_responses_arrive_whole_and_in_order(gateway, records, client):
    topic, values = records
    read_all = confluent_read_all if client == "confluent" else kafka_python_read_all
    check(read_all(gateway, topic, len(values)), values)


@pytest.mark.portcullis_only
def test_the_same_records_through_tls_arrive_whole_and_in_order(gateway_tls, records):
    topic, values = records
    check(confluent_read_all(gateway_tls, topic, len(values)), values)


@pytest.mark.portcullis_only
def test_on_plain_tcp_the_rest_of_a_large_response_is_spliced_and_arrives_exact(launcher, records):
    """Between two plain TCP sockets the rest of a large unchanged response is moved with
    splice(2), never copied into Portcullis (host/src/server/splice.rs); the records must still
    arrive byte for byte, and the relay's counter must show the spliced path was taken."""
    topic, values = records
    p, metrics = start_portcullis(launcher, "relay-splice")
    before = scrape(metrics)
    own = Gateway(name=p.name, bootstrap=p.bootstrap, security_protocol="SASL_PLAINTEXT",
                  users=dict(PORTCULLIS_USERS), broker_addresses={}, hidden_ports=set(), process=p)
    check(confluent_read_all(own, topic, len(values)), values)
    after = scrape(metrics)
    spliced = total(after, RELAYED, path="spliced") - total(before, RELAYED, path="spliced")
    buffered = total(after, RELAYED, path="buffered") - total(before, RELAYED, path="buffered")
    payload = RECORDS * RECORD_SIZE
    # Each response's first read (its header and what came with it) goes through the buffer; the
    # rest of every response of 16 KiB or more is spliced.
    assert spliced + buffered >= payload, (spliced, buffered)
    assert spliced >= payload // 2, f"only {spliced} of {spliced + buffered} bytes were spliced"
