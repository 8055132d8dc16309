"""Graceful restarts measured against Kafka's own (issue 25 §2): the same producers, once writing
straight to a Kafka broker that is restarted (SIGTERM, then started again on the same data), once
writing through a Portcullis in front of that broker that is restarted the same way. For each, the
duplicates per million acknowledged records of non-idempotent producers (kafka-python, acks=all, 5
requests in flight) and of idempotent ones (librdkafka, enable.idempotence).

Portcullis must not duplicate more than Kafka does when Kafka itself restarts, and idempotent
producers must see none through either; no acknowledged record may be lost.

A restart that answers nothing it has forwarded makes a non-idempotent producer resend batches the
broker wrote; the broker's own restart has the same window (a produce written to the log whose
response was not read). The figures of both are printed side by side.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from clients import confluent_conf, kafka_python_conf, key_counts
from conftest import _portcullis_gateway
from own_kafka import OwnKafka
from reauth_support import start_portcullis

pytestmark = [pytest.mark.portcullis_only, pytest.mark.long]

RESTARTS = 3
# Between restarts: long enough for every producer to be writing at full rate again.
RUN_SECONDS = 4.0
VALUE = b"v" * 100


@dataclass
class Counts:
    sent: int = 0
    acked: int = 0
    acked_keys: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)


class _Writer(threading.Thread):
    """One producer writing unique keys `<prefix>-<n>` to one partition until told to stop."""

    def __init__(self, kind: str, conf: dict, topic: str, partition: int, stop: threading.Event):
        super().__init__(name=f"restart-{kind}-{partition}", daemon=True)
        self.kind, self.conf, self.topic, self.partition, self.stop = kind, conf, topic, partition, stop
        self.prefix = f"{kind}-{partition}"
        self.counts = Counts()
        self.lock = threading.Lock()

    def _acked(self, key: str) -> None:
        with self.lock:
            self.counts.acked += 1
            self.counts.acked_keys.add(key)

    def _failed(self, error: str) -> None:
        with self.lock:
            self.counts.failed.append(error)

    def run(self) -> None:
        if self.kind == "idempotent":
            self._run_librdkafka()
        else:
            self._run_kafka_python()

    def _run_kafka_python(self) -> None:
        p = KafkaProducer(acks="all", linger_ms=2, max_in_flight_requests_per_connection=5,
                          enable_idempotence=False, retries=2**31 - 1, delivery_timeout_ms=120000,
                          reconnect_backoff_ms=100, reconnect_backoff_max_ms=1000, **self.conf)
        try:
            while not self.stop.is_set():
                key = f"{self.prefix}-{self.counts.sent}"
                p.send(self.topic, key=key.encode(), value=VALUE, partition=self.partition) \
                    .add_callback(lambda _, k=key: self._acked(k)) \
                    .add_errback(lambda e: self._failed(repr(e)))
                self.counts.sent += 1
                if self.counts.sent % 100 == 0:
                    time.sleep(0.002)
            p.flush(timeout=120)
        finally:
            p.close(timeout=30)

    def _run_librdkafka(self) -> None:
        p = Producer({**self.conf, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                      "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 1000})

        def delivered(err, msg):
            if err is None:
                self._acked(msg.key().decode())
            else:
                self._failed(str(err))

        while not self.stop.is_set():
            key = f"{self.prefix}-{self.counts.sent}"
            try:
                p.produce(self.topic, key=key.encode(), value=VALUE, partition=self.partition,
                          on_delivery=delivered)
            except BufferError:
                p.poll(0.05)
                continue
            self.counts.sent += 1
            p.poll(0)
            if self.counts.sent % 100 == 0:
                time.sleep(0.002)
        p.flush(120)


@dataclass
class Outcome:
    acked: int
    stored: int
    duplicated: int
    lost: int
    failed: int

    @property
    def per_million(self) -> float:
        return 1e6 * self.duplicated / max(self.acked, 1)


def _run_phase(restart, conf_for: dict[str, dict], bootstrap: str, topic: str) -> dict[str, Outcome]:
    """Two producers of each kind write while `restart()` runs RESTARTS times; returns, per kind,
    what was acknowledged, stored, duplicated and lost."""
    kinds = ["non-idempotent", "idempotent"]
    partitions = 2 * len(kinds)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result(30)
    stop = threading.Event()
    writers = [_Writer(kind, conf_for[kind], topic, 2 * i + j, stop)
               for i, kind in enumerate(kinds) for j in range(2)]
    for w in writers:
        w.start()
    try:
        for _ in range(RESTARTS):
            time.sleep(RUN_SECONDS)
            restart()
        time.sleep(RUN_SECONDS)
    finally:
        stop.set()
        for w in writers:
            w.join(timeout=240)
    assert all(not w.is_alive() for w in writers), "a producer did not finish"
    counts = key_counts({"bootstrap.servers": bootstrap}, topic, partitions)
    out = {}
    for kind in kinds:
        mine = [w for w in writers if w.kind == kind]
        acked_keys = set().union(*(w.counts.acked_keys for w in mine))
        keys = {k: n for k, n in counts.items() if k.startswith(f"{kind}-")}
        out[kind] = Outcome(
            acked=sum(w.counts.acked for w in mine),
            stored=sum(keys.values()),
            duplicated=sum(1 for n in keys.values() if n > 1),
            lost=len(acked_keys - keys.keys()),
            failed=sum(len(w.counts.failed) for w in mine),
        )
    return out


def test_restarts_duplicate_no_more_through_portcullis_than_kafka_restarting_itself(launcher, run_dir,
                                                                                     kafka_env, unique):
    kafka = OwnKafka(run_dir / f"kafka-restarts-{time.monotonic_ns()}")
    kafka.start()
    try:
        p, _ = start_portcullis(launcher, "restarts",
                                upstream={"bootstrap_servers": [kafka.bootstrap], "security_protocol": "PLAINTEXT"},
                                extra_sections={"shutdown": {"grace_ms": 10000}})
        gw = _portcullis_gateway("restarts", p, kafka_env, "SASL_PLAINTEXT", None)
        gw.hidden_ports = {int(kafka.bootstrap.rsplit(":", 1)[1])}
        user, password = gw.user("alice")

        def restart_kafka():
            kafka.stop()
            kafka.relaunch()

        def restart_portcullis():
            log_from = p.log_size()
            code = p.stop()
            assert code == 0, f"exit code {code}:\n{p.log_since(log_from, 20)}"
            p.stopping = False
            p.start()

        direct = {
            "non-idempotent": {"bootstrap_servers": kafka.bootstrap, "request_timeout_ms": 20000},
            "idempotent": {"bootstrap.servers": kafka.bootstrap},
        }
        through = {
            "non-idempotent": kafka_python_conf(gw, "SCRAM-SHA-512", user, password),
            "idempotent": confluent_conf(gw, "SCRAM-SHA-512", user, password),
        }
        results = {
            "kafka restarted": _run_phase(restart_kafka, direct, kafka.bootstrap, unique("restart-kafka")),
            "portcullis restarted": _run_phase(restart_portcullis, through, kafka.bootstrap,
                                               unique("restart-portcullis")),
        }
    finally:
        kafka.stop()
    lines = [f"{'':22} {'producer':15} {'acked':>8} {'stored':>8} {'dup':>5} {'dup/M':>8} {'lost':>5} {'failed':>6}"]
    for phase, by_kind in results.items():
        for kind, o in by_kind.items():
            lines.append(f"{phase:22} {kind:15} {o.acked:8} {o.stored:8} {o.duplicated:5} "
                         f"{o.per_million:8.1f} {o.lost:5} {o.failed:6}")
    print(f"{RESTARTS} restarts each:\n" + "\n".join(lines))
    for phase, by_kind in results.items():
        for kind, o in by_kind.items():
            assert o.acked > 1000, (phase, kind, o)
            assert o.lost == 0, (phase, kind, o)
        assert by_kind["idempotent"].duplicated == 0, (phase, by_kind)
    kafka_rate = results["kafka restarted"]["non-idempotent"].per_million
    portcullis_rate = results["portcullis restarted"]["non-idempotent"].per_million
    assert portcullis_rate <= kafka_rate, "\n".join(lines)
