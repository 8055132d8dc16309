"""`delegated` vs `passthrough`, same run, same Kafka (issue 14).

    source scripts/lib/kafka.sh && kafka_start /tmp/k && kafka_env_file /tmp/k/env
    source /tmp/k/env && PORTCULLIS_BIN=target/release/portcullis \\
        ~/.cache/portcullis/venv/bin/python benches/delegated/bench.py [--principals 8] [--mb 40]

Two Portcullis nodes on the suite's Kafka SASL listener, logged in as the same service user
(tests/interop/test_delegated.py sets it up: CreateTokens/DescribeTokens on every user, Write on
the bench topic). For each node:

- first-request latency of a new principal: a fresh AdminClient lists the topics (ApiVersions, SASL
  to Portcullis, Metadata); with `delegated` Metadata waits for the principal's token (creation,
  the broker's cache showing it, a SCRAM tokenauth login upstream);
- the same for a principal whose token is cached (a second client of the same user);
- steady-state produce throughput: `--mb` MB in 10 kB records, acks=all, one producer.

Prints one line per measurement, nodes interleaved; the medians go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "interop"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

import test_delegated as td  # noqa: E402
from conftest import JavaTool  # noqa: E402
from test_delegation_tokens import ACL_COMMAND  # noqa: E402


def first_request_ms(node, user: str) -> float:
    start = time.perf_counter()
    AdminClient(td.conf(node, user)).list_topics(timeout=30)
    return (time.perf_counter() - start) * 1000


def throughput_mb_s(node, user: str, topic: str, mb: int) -> float:
    p = Producer({**td.conf(node, user), "linger.ms": 5, "batch.size": 262144, "acks": "all"})
    payload = b"x" * 10_000
    n = mb * 100
    p.produce(topic, payload)
    p.flush(30)  # connections and metadata ready
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(300) == 0
    return n * len(payload) / (time.perf_counter() - start) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--principals", type=int, default=8)
    ap.add_argument("--mb", type=int, default=40)
    args = ap.parse_args()
    kafka_env = {k: os.environ[k] for k in ("KAFKA_SASL_BOOTSTRAP", "KAFKA_LIB", "KAFKA_ADMIN_USER",
                                            "KAFKA_ADMIN_PASSWORD")}
    binary = Path(os.environ["PORTCULLIS_BIN"])
    work = Path(tempfile.mkdtemp(prefix="bench-delegated."))
    java = JavaTool(Path(kafka_env["KAFKA_LIB"]),
                    Path(os.environ.get("PORTCULLIS_CACHE", Path.home() / ".cache" / "portcullis")))
    tools = td.setup_upstream(java, kafka_env, work)
    users = {f"bench-{i}": f"bench-{i}-pw" for i in range(args.principals)}
    td.USERS.update(users)
    topic = f"bench-delegated-{os.getpid()}"
    td.admin_outcome(td.kafka_conf(kafka_env, "admin"), "create", topic)
    grants = [("g-svc", ACL_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
               ["--add", "--allow-principal", f"User:{td.SERVICE}", "--operation", "All", "--topic", topic])]
    grants += [(f"g-{u}", ACL_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
                ["--add", "--allow-principal", f"User:{u}", "--operation", "All", "--topic", topic])
               for u in users]
    for label, r in tools.run(grants).items():
        assert r["rc"] == 0, (label, r)
    time.sleep(2)
    nodes = {"delegated": td.start_node(work, binary, kafka_env, "delegated"),
             "passthrough": td.start_node(work, binary, kafka_env, "passthrough", policy="passthrough")}
    try:
        first = {name: [] for name in nodes}
        cached = {name: [] for name in nodes}
        for user in users:
            for name, node in nodes.items():
                first[name].append(first_request_ms(node, user))
                cached[name].append(first_request_ms(node, user))
        for name in nodes:
            print(f"{name:12} first request, new principal   : median {statistics.median(first[name]):7.1f} ms "
                  f"(min {min(first[name]):.1f}, max {max(first[name]):.1f}, n={len(first[name])})")
            print(f"{name:12} first request, cached principal: median {statistics.median(cached[name]):7.1f} ms "
                  f"(min {min(cached[name]):.1f}, max {max(cached[name]):.1f}, n={len(cached[name])})")
        rates = {name: [] for name in nodes}
        user = next(iter(users))
        for _ in range(3):
            for name, node in nodes.items():
                rates[name].append(throughput_mb_s(node, user, topic, args.mb))
        for name in nodes:
            print(f"{name:12} produce {args.mb} MB, 10 kB records: "
                  + ", ".join(f"{r:.1f}" for r in rates[name])
                  + f" MB/s (median {statistics.median(rates[name]):.1f})")
    finally:
        for node in nodes.values():
            node.stop()


if __name__ == "__main__":
    main()
