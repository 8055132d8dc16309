"""`telemetry.trace_sample_ratio` is live (issue 23): a node exporting to a real Jaeger with
ratio 0.0 traces no connection; after a reload to 1.0, every new connection is a trace, with no
restart (the sampler reads the ratio on each root span). The Jaeger all-in-one is the one
test_telemetry.py starts (`JAEGER_BIN`, built by scripts/lib/jaeger.sh)."""

from __future__ import annotations

import time

import pytest

from conftest import PORTCULLIS_USERS
from kafka_wire import Conn
from reload_support import ReloadNode, Settings, wait_for
import test_telemetry
from test_telemetry import get_json

pytestmark = pytest.mark.portcullis_only

# test_telemetry.py's Jaeger fixture (a Jaeger of this module's own, started once for it).
jaeger = test_telemetry.jaeger


class TracedNode(ReloadNode):
    """A ReloadNode whose `[telemetry]` also exports spans to Jaeger at `ratio`."""

    def __init__(self, launcher, name: str, endpoint: str, service: str, ratio: float):
        self.telemetry = (endpoint, service, ratio)
        super().__init__(launcher, name, Settings())

    def text(self, s: Settings) -> str:
        endpoint, service, ratio = self.telemetry
        return super().text(s).replace(
            "[telemetry]\n",
            f'[telemetry]\nservice_name = "{service}"\notlp_endpoint = "{endpoint}"\n'
            f'otlp_protocol = "http/protobuf"\ntrace_sample_ratio = {ratio}\n', 1)


def connection_traces(query: str, service: str) -> int:
    data = get_json(f"{query}/api/traces?service={service}&limit=50&lookback=1h")["data"] or []
    return sum(1 for t in data if any(s["operationName"] == "kafka.connection" for s in t["spans"]))


def connect(node: ReloadNode, n: int) -> None:
    for _ in range(n):
        with Conn("127.0.0.1", node.process.listener_port) as c:
            c.authenticate_plain("alice", PORTCULLIS_USERS["alice"])
            assert c.metadata_v1()


def test_a_new_trace_sample_ratio_applies_to_the_next_connections(launcher, jaeger, unique):
    service = unique("reload-sampling")
    node = TracedNode(launcher, service, jaeger["otlp"]["http/protobuf"], service, 0.0)
    connect(node, 3)

    node.telemetry = (*node.telemetry[:2], 1.0)
    node.write(node.settings)
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "telemetry.trace_sample_ratio" in r.stdout, r.stdout
    connect(node, 4)
    # The 4 connections after the reload arrive (the batch exporter sends within ~5 s)...
    wait_for(lambda: connection_traces(jaeger["query"], service) >= 4, 30,
             "the connections after the reload are traced")
    # ...and none of the 3 before it: give a late export of theirs the same time to show up.
    time.sleep(6)
    assert connection_traces(jaeger["query"], service) == 4
