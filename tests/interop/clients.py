"""Client helpers shared by the interop tests: confluent-kafka (librdkafka 2.16) and kafka-python 2.3."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def value_for(key: str) -> bytes:
    """Values derived from keys, so a record delivered under the wrong key is caught."""
    return f"{key}|{'v' * 40}|{key[::-1]}".encode()


# --------------------------------------------------------------------------------------------------
# confluent-kafka


def confluent_conf(gateway, mechanism: str, user: str, password: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": gateway.bootstrap,
        "security.protocol": gateway.security_protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        # Keep librdkafka's console output to errors; passwords never appear at this level.
        "log_level": 3,
    }
    if gateway.ca_file is not None:
        conf["ssl.ca.location"] = str(gateway.ca_file)
    conf.update(extra)
    return conf


def confluent_create_topic(conf: dict, topic: str, partitions: int = 2) -> None:
    """Creates the topic and returns once Metadata (through `conf`'s endpoint) shows it with every
    partition led: Kafka answers CreateTopics when the controller has committed it, and a broker's
    metadata follows later, so a consumer subscribing right away can be told the topic is not
    there (UNKNOWN_TOPIC_OR_PART, seen under load)."""
    admin = AdminClient(conf)
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=30, request_timeout=30)
    for f in futures.values():
        try:
            f.result(timeout=60)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    deadline = time.monotonic() + 30
    while True:
        shown = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if (shown is not None and shown.error is None and shown.partitions
                and all(p.leader >= 0 for p in shown.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} not in metadata with every partition led after 30 s")
        time.sleep(0.1)


def confluent_produce(conf: dict, topic: str, n: int) -> dict[str, bytes]:
    sent: dict[str, bytes] = {}
    failures: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            failures.append(str(err))

    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    for i in range(n):
        key = f"ck-{i}"
        sent[key] = value_for(key)
        while True:
            try:
                p.produce(topic, key=key.encode(), value=sent[key], on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(60)
    assert remaining == 0, f"{remaining} records not delivered within 60s"
    assert not failures, f"delivery failures: {failures[:5]}"
    return sent


def confluent_consume(conf: dict, topic: str, group: str, expected: int, timeout: float = 60) -> dict[str, bytes]:
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: dict[str, bytes] = {}
    duplicates = 0
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            key = msg.key().decode()
            if key in got:
                duplicates += 1
            got[key] = msg.value()
        c.commit(asynchronous=False)
        committed = c.committed(c.assignment(), timeout=30)
        assert sum(max(tp.offset, 0) for tp in committed) == expected, f"committed offsets {committed}"
    finally:
        c.close()
    assert duplicates == 0, f"{duplicates} duplicate records"
    return got


def confluent_expect_auth_failure(conf: dict, timeout: float = 10) -> list[KafkaError]:
    """Returns the authentication errors reported; raises AssertionError if the client got in.

    librdkafka reports a refused login through error_cb (served by poll) as _AUTHENTICATION, while
    metadata calls just fail with a transport error; so poll until that error shows up.
    """
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    md = None
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=1)
            break
        except KafkaException:
            pass
        admin.poll(0.1)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    del admin  # stop its reconnect loop
    assert md is None, f"authenticated with bad credentials: brokers {md.brokers}"
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"no authentication error reported; errors: {[e.str() for e in errors]}"
    return auth


# --------------------------------------------------------------------------------------------------
# kafka-python


def kafka_python_conf(gateway, mechanism: str, user: str, password: str) -> dict:
    conf = {
        "bootstrap_servers": gateway.bootstrap,
        "security_protocol": gateway.security_protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "request_timeout_ms": 20000,
    }
    if gateway.ca_file is not None:
        conf["ssl_cafile"] = str(gateway.ca_file)
        conf["ssl_check_hostname"] = True
    return conf


class CaptureErrors(logging.Handler):
    """Collects kafka-python's ERROR log records (messages only; no DEBUG, so no PLAIN passwords)."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        self.logger = logging.getLogger("kafka")
        self.old_level = self.logger.level
        self.logger.setLevel(logging.ERROR)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self)
        self.logger.setLevel(self.old_level)


def key_counts(conf: dict, topic: str, partitions: int, timeout: float = 120) -> dict[str, int]:
    """How many times each key is stored in `topic` (every record of its `partitions`, from offset 0
    to the end as it is now): what duplicate and loss checks count."""
    c = Consumer({**conf, "group.id": f"{topic}-readback", "enable.auto.commit": False})
    counts: dict[str, int] = {}
    try:
        tps = [TopicPartition(topic, i, 0) for i in range(partitions)]
        end = sum(c.get_watermark_offsets(tp, timeout=30)[1] for tp in tps)
        c.assign(tps)
        read = 0
        deadline = time.monotonic() + timeout
        while read < end and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            read += 1
            key = msg.key().decode()
            counts[key] = counts.get(key, 0) + 1
        assert read == end, f"read {read} of {end} records of {topic}"
    finally:
        c.close()
    return counts


def set_scram_password(admin, user: str, password: str, mechanism=None) -> None:
    """Creates or changes `user`'s SCRAM credential on Kafka (SCRAM-SHA-512 unless `mechanism`,
    a confluent_kafka ScramMechanism, says otherwise; 4096 iterations) through `admin`, a
    confluent-kafka AdminClient logged in as a super user."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    mechanism = mechanism or ScramMechanism.SCRAM_SHA_512
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), password.encode())
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(timeout=30)
