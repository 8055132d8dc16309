"""Mutation latency on a three-node cluster (`[store] kind = "kafka"`): CreateAcls answered by the
writer itself vs through a follower (forwarded in an Envelope), sequential requests from one
AdminClient each, p50/p99. Run by scripts/bench-cluster.sh (which starts Kafka and builds the
binary); docs/benchmarks.md, "Cluster", has the figures.

  python scripts/bench_cluster.py [SAMPLES]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "interop"))

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,  # noqa: E402
                                   ResourcePatternType, ResourceType)

from cluster_support import admin_conf, start_cluster  # noqa: E402
from conftest import Launcher  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def measure(admin: AdminClient, label: str, samples: int) -> list[float]:
    took = []
    for i in range(samples + 20):
        b = AclBinding(ResourceType.TOPIC, f"bench-{label}-{time.time_ns()}-{i}", ResourcePatternType.LITERAL,
                       "User:bench", "*", AclOperation.READ, AclPermissionType.ALLOW)
        start = time.perf_counter()
        admin.create_acls([b], request_timeout=30)[b].result(timeout=40)
        if i >= 20:  # the first requests warm connections up
            took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> None:
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    run = Path(os.environ.get("BENCH_RUN_DIR", "/tmp")) / f"bench-cluster-{os.getpid()}"
    run.mkdir(parents=True)
    kafka = {k: os.environ[k] for k in ("KAFKA_BOOTSTRAP", "KAFKA_ADMIN_USER", "KAFKA_ADMIN_PASSWORD")}
    launcher = Launcher(Path(os.environ["PORTCULLIS_BIN"]), run, kafka)
    try:
        cluster = start_cluster(launcher, "bench", 3)
        writer = cluster.writer()
        follower = (writer + 1) % 3
        results = {}
        # Interleaved rounds, so that load from elsewhere on the machine hits both alike.
        on = {"writer": AdminClient(admin_conf(cluster.nodes[writer])),
              "follower": AdminClient(admin_conf(cluster.nodes[follower]))}
        for _ in range(3):
            for label, admin in on.items():
                results.setdefault(label, []).extend(measure(admin, label, samples // 3))
        print(f"{'path':<10} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        for label, took in results.items():
            print(f"{label:<10} {len(took):>5} {percentile(took, 50):>8.1f} {percentile(took, 99):>8.1f} "
                  f"{statistics.mean(took):>8.1f}")
    finally:
        launcher.stop_all()


if __name__ == "__main__":
    main()
