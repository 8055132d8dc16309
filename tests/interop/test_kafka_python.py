"""kafka-python 2.3 (SaslAuthenticate v0, broker version inferred from ApiVersions) through the gateway."""

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError

from clients import CaptureErrors, kafka_python_conf, value_for


def produce_consume(gateway, mechanism, topic, group, n=500):
    user, password = gateway.user("alice")
    conf = kafka_python_conf(gateway, mechanism, user, password)
    producer = KafkaProducer(acks="all", linger_ms=5, **conf)
    try:
        # Inferred from the ApiVersions the gateway advertises: too few APIs and kafka-python 2.x
        # guesses an old broker and falls back to SaslHandshake v0 (raw SASL frames).
        api_version = producer.config["api_version"]
        assert api_version >= (2, 0), f"kafka-python inferred broker version {api_version}"
        handshake_versions = {c._sasl_handshake_version() for c in producer._sender._client._conns.values()}
        assert handshake_versions == {1}, f"SaslHandshake versions used: {handshake_versions}"
        sent = {}
        futures = []
        for i in range(n):
            key = f"kp-{i}"
            sent[key] = value_for(key)
            futures.append(producer.send(topic, key=key.encode(), value=sent[key]))
        producer.flush(timeout=60)
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close(timeout=10)

    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=2000, **conf)
    got = {}
    try:
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                for r in records:
                    assert r.key.decode() not in got, f"duplicate {r.key!r}"
                    got[r.key.decode()] = r.value
        consumer.commit()
    finally:
        consumer.close()
    assert got == sent


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_kafka_python_produce_consume(gateway, unique, mechanism):
    produce_consume(gateway, mechanism, unique("kp-" + mechanism.lower()), unique("kp-group"))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_kafka_python_bad_credentials_are_refused(gateway, mechanism, who):
    """kafka-python retries a failed login forever: bound it, then check it failed *because* the
    gateway said SASL_AUTHENTICATION_FAILED (not a timeout or a dropped connection)."""
    user, password = gateway.user("alice")
    if who == "wrong-password":
        password = password + "-wrong"
    else:
        user = "mallory"
    conf = kafka_python_conf(gateway, mechanism, user, password)
    with CaptureErrors() as captured:
        producer = KafkaProducer(max_block_ms=4000, **conf)
        try:
            with pytest.raises(KafkaTimeoutError):
                producer.send("never-created", b"x").get(timeout=10)
        finally:
            producer.close(timeout=2)
    assert any("SaslAuthenticationFailedError" in m for m in captured.messages), captured.messages[:5]
