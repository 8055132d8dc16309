"""SIGTERM under load (issue 7 §5, §6): Portcullis stops accepting, answers every request it has
already forwarded, closes each connection the lingering way, and exits; restarted, it serves the
same clients again. Four non-idempotent kafka-python producers (5 requests in flight each) write
through three such restarts: every acknowledged record is stored, none twice.

Before graceful shutdown the process exited 0.01 s after SIGTERM without answering what it had
forwarded; the producers resent batches Kafka had already written (267 duplicates over 3 restarts
in the issue's measurement).
"""

from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaProducer

from clients import confluent_conf, confluent_create_topic, kafka_python_conf, key_counts
from conftest import _portcullis_gateway
from reauth_support import start_portcullis

pytestmark = pytest.mark.portcullis_only

PRODUCERS = 4
PARTITIONS = 4
RESTARTS = 3


class _Producer(threading.Thread):
    def __init__(self, gw, topic: str, index: int, stop: threading.Event):
        super().__init__(name=f"shutdown-producer-{index}", daemon=True)
        self.gw, self.topic, self.index, self.stop = gw, topic, index, stop
        self.sent = 0
        self.acked = 0
        self.failed: list[str] = []

    def run(self) -> None:
        user, password = self.gw.user("alice")
        p = KafkaProducer(acks="all", linger_ms=2, max_in_flight_requests_per_connection=5,
                          reconnect_backoff_ms=100, reconnect_backoff_max_ms=1000,
                          **kafka_python_conf(self.gw, "SCRAM-SHA-512", user, password))

        def ok(_):
            self.acked += 1

        def failed(e):
            self.failed.append(repr(e))

        try:
            while not self.stop.is_set():
                key = f"{self.index}-{self.sent}".encode()
                p.send(self.topic, key=key, value=b"v" * 100,
                       partition=self.index % PARTITIONS).add_callback(ok).add_errback(failed)
                self.sent += 1
                if self.sent % 100 == 0:
                    time.sleep(0.002)
            p.flush(timeout=120)
        finally:
            p.close(timeout=30)


def test_sigterm_answers_what_was_forwarded_and_loses_or_duplicates_nothing(launcher, kafka_env, unique):
    p, _ = start_portcullis(launcher, "shutdown", extra_sections={"shutdown": {"grace_ms": 10000}})
    gw = _portcullis_gateway("shutdown", p, kafka_env, "SASL_PLAINTEXT", None)
    user, password = gw.user("alice")
    conf = confluent_conf(gw, "SCRAM-SHA-512", user, password)
    topic = unique("shutdown")
    confluent_create_topic(conf, topic, partitions=PARTITIONS)
    stop = threading.Event()
    producers = [_Producer(gw, topic, i, stop) for i in range(PRODUCERS)]
    for t in producers:
        t.start()
    stops = []
    try:
        for _ in range(RESTARTS):
            time.sleep(4.0)
            log_from = p.log_size()
            started = time.monotonic()
            code = p.stop()
            stops.append((round(time.monotonic() - started, 2), code))
            log = p.log_since(log_from, 20)
            assert code == 0, f"exit code {code}:\n{log}"
            assert "stopped: every connection closed" in log, log
            p.stopping = False
            p.start()
        time.sleep(4.0)
    finally:
        stop.set()
        for t in producers:
            t.join(timeout=180)
    sent = sum(t.sent for t in producers)
    acked = sum(t.acked for t in producers)
    failed = [f for t in producers for f in t.failed]
    counts = key_counts(conf, topic, PARTITIONS)
    duplicated = {k: n for k, n in counts.items() if n > 1}
    expected = {f"{t.index}-{i}" for t in producers for i in range(t.sent)}
    lost = expected - counts.keys()
    print(f"stops (seconds, exit code): {stops}; sent {sent}, acknowledged {acked}, "
          f"stored {sum(counts.values())}, duplicated {len(duplicated)}, lost {len(lost)}")
    assert all(not t.is_alive() for t in producers), "a producer did not finish"
    assert not failed, failed[:5]
    assert acked == sent, (acked, sent)
    assert not lost, sorted(lost)[:10]
    assert not duplicated, dict(list(duplicated.items())[:10])

