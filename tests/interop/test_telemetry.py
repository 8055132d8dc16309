"""Observability end to end (docs/observability.md): a real Jaeger all-in-one (Jaeger v2, built
from the Go module by scripts/lib/jaeger.sh; `JAEGER_BIN`) receives OTLP from a Portcullis, once
over OTLP/gRPC and once over OTLP/HTTP (`otlp_protocol`), while confluent-kafka logs in and
produces; the test finds the produce's trace through Jaeger's HTTP query API, with its SASL and
authorization spans. The same Portcullis' Prometheus endpoint is scraped: its counters match
what the test did (n logins, m failed logins, k denials), and /healthz and /readyz answer. The
metrics pushed over OTLP reach Jaeger's collector too, whose own Prometheus exporter re-exposes
them: the pushed login count matches."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from conftest import PORTCULLIS_USERS, free_ports, host_port, wait_for_port
from kafka_wire import Conn, plain_token
from prometheus import MetricsEndpoint, scrape, total
from reauth_support import start_portcullis

pytestmark = pytest.mark.portcullis_only

JAEGER_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
    metrics:
      receivers: [otlp]
      exporters: [prometheus]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
  prometheus:
    endpoint: 127.0.0.1:{pushed_metrics}
"""


@pytest.fixture(scope="module")
def jaeger(run_dir, request):
    binary = os.environ.get("JAEGER_BIN")
    if not binary or not os.access(binary, os.X_OK):
        raise RuntimeError("JAEGER_BIN must name the Jaeger binary: scripts/test.sh builds it with scripts/lib/jaeger.sh")
    # One Jaeger per module that uses the fixture (test_reload_telemetry imports it), each in a
    # directory of its own: one pytest worker may run both modules.
    workdir = run_dir / f"jaeger-{request.module.__name__}"
    workdir.mkdir(parents=True, exist_ok=False)
    query, query_grpc, otlp_grpc, otlp_http, pushed_metrics = free_ports(5)
    config = workdir / "jaeger.yaml"
    config.write_text(JAEGER_CONFIG.format(query=query, query_grpc=query_grpc, otlp_grpc=otlp_grpc,
                                           otlp_http=otlp_http, pushed_metrics=pushed_metrics))
    log = (workdir / "jaeger.log").open("w")
    # Jaeger's own traces would go to a default OTLP endpoint that is not there.
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}
    proc = subprocess.Popen([binary, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_port("127.0.0.1", query, 60, proc)
        for port in (otlp_grpc, otlp_http, pushed_metrics):
            wait_for_port("127.0.0.1", port, 60, proc)
        yield {
            "query": f"http://127.0.0.1:{query}",
            "otlp": {"grpc": f"http://127.0.0.1:{otlp_grpc}", "http/protobuf": f"http://127.0.0.1:{otlp_http}"},
            "pushed_metrics": MetricsEndpoint(f"127.0.0.1:{pushed_metrics}"),
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def client(p, user: str, password: str, **extra) -> dict:
    return {
        "bootstrap.servers": p.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def tags(span: dict) -> dict:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_produce_is_traced_in_jaeger_and_counted_in_prometheus(launcher, jaeger, protocol):
    name = "grpc" if protocol == "grpc" else "http"
    service = f"portcullis-e2e-{name}"
    p, metrics = start_portcullis(
        launcher, f"telemetry-{name}",
        extra_sections={
            # alice may do everything; carol nothing (no ACL: denied).
            "authorizer": {"plugin": "acl", "super_users": ["User:alice"]},
            "telemetry": {"otlp_endpoint": jaeger["otlp"][protocol], "otlp_protocol": protocol,
                          "service_name": service, "metrics_export_interval_ms": 300},
        },
    )
    admin_base = f"http://{metrics.address}"
    assert get(f"{admin_base}/healthz") == (200, "ok\n")
    assert get(f"{admin_base}/readyz") == (200, "ready\n")
    before = scrape(metrics)

    # Exact counts come from raw-wire PLAIN logins, one connection each (a Kafka client library
    # opens as many connections, each with its own login, as it sees fit).
    n_logins, m_failures = 3, 2
    for _ in range(n_logins):
        with Conn(*host_port(p.bootstrap)) as c:
            c.authenticate_plain("carol", PORTCULLIS_USERS["carol"])
    for _ in range(m_failures):
        with Conn(*host_port(p.bootstrap)) as c:
            assert c.sasl_handshake("PLAIN")[0] == 0
            assert c.sasl_authenticate(plain_token("carol", "not-the-password"))[0] == 58

    topic = f"telemetry-{int(time.time() * 1000)}"
    # n = 1 successful login that produces.
    producer = Producer(client(p, "alice", PORTCULLIS_USERS["alice"], **{"linger.ms": 0}))
    delivered = []
    producer.produce(topic, b"traced", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0 and delivered == [None], delivered
    del producer
    # m = 1 failed login (librdkafka would retry: one attempt, then stop).
    bad = AdminClient(client(p, "alice", "not-the-password", **{"reconnect.backoff.ms": 60000,
                                                                  "reconnect.backoff.max.ms": 60000}))
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=5)
    del bad
    # carol logs in and is denied a Describe of the topic (Metadata for one topic).
    carol = AdminClient(client(p, "carol", PORTCULLIS_USERS["carol"]))
    md = carol.list_topics(topic=topic, timeout=15)
    assert md.topics[topic].error is not None  # TOPIC_AUTHORIZATION_FAILED
    del carol

    # Prometheus: the differences are exactly what happened above.
    def diff(series, **labels):
        return total(scrape(metrics), series, **labels) - total(before, series, **labels)

    deadline = time.monotonic() + 15
    while True:
        logins = diff("portcullis_authentications_total", outcome="success", reauthentication="false",
                      sasl_mechanism="PLAIN")
        failures = diff("portcullis_authentications_total", outcome="failure", reauthentication="false",
                        sasl_mechanism="PLAIN")
        denials = diff("portcullis_authorization_decisions_total", outcome="denied",
                       resource_type="TOPIC", operation="DESCRIBE")
        if (logins, failures) == (n_logins, m_failures) and denials >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert logins == n_logins, "the raw PLAIN logins"
    assert failures == m_failures, "the raw PLAIN logins with a wrong password"
    assert diff("portcullis_authentications_total", outcome="failure", sasl_mechanism="SCRAM-SHA-512") >= 1, \
        "the client library's wrong password"
    assert denials >= 1, "carol's Describe of the topic"
    assert diff("portcullis_authorization_decisions_total", outcome="allowed",
                resource_type="TOPIC", operation="WRITE") >= 1
    assert diff("portcullis_upstream_request_duration_seconds_count", messaging_operation_name="Produce") >= 1

    # The same counters pushed over OTLP (this protocol) and re-exposed by Jaeger's collector,
    # under this Portcullis' service name (the `job` label): the same PLAIN login count as its
    # own endpoint, which includes this test's n logins.
    local = total(scrape(metrics), "portcullis_authentications_total", outcome="success",
                  sasl_mechanism="PLAIN")
    assert local >= n_logins
    deadline = time.monotonic() + 15
    while True:
        pushed = total(scrape(jaeger["pushed_metrics"]), "portcullis_authentications_total", job=service,
                       outcome="success", sasl_mechanism="PLAIN")
        if pushed == local or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert pushed == local, f"the logins pushed over OTLP ({protocol}) as Jaeger's collector saw them"

    # Jaeger: the trace of alice's produce, with its SASL and authorization spans.
    deadline = time.monotonic() + 30
    found = None
    while found is None and time.monotonic() < deadline:
        data = get_json(f"{jaeger['query']}/api/traces?service={service}&limit=50&lookback=1h")
        for trace in data.get("data") or []:
            names = {s["operationName"] for s in trace["spans"]}
            if "kafka Produce" in names:
                found = trace
                break
        if found is None:
            time.sleep(0.5)
    assert found is not None, f"no trace with a Produce span reached Jaeger over {protocol}"
    spans = {s["spanID"]: s for s in found["spans"]}

    def parent_of(span):
        refs = [r for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
        return spans.get(refs[0]["spanID"]) if refs else None

    produce = next(s for s in spans.values() if s["operationName"] == "kafka Produce")
    assert tags(produce)["enduser.id"] == "User:alice"
    assert tags(produce)["portcullis.route"] == "upstream"
    assert parent_of(produce)["operationName"] == "kafka.connection"
    kids = [s for s in spans.values() if parent_of(s) is produce]
    authorize = [s for s in kids if s["operationName"] == "authorize"]
    assert authorize and tags(authorize[0])["authz.decision"] == "allowed"
    assert tags(authorize[0])["authz.rule"].startswith("super_user")
    assert any(s["operationName"] == "upstream" for s in kids)
    sasl = [s for s in spans.values() if s["operationName"] == "sasl.authenticate"]
    assert len(sasl) == 1
    assert tags(sasl[0])["sasl.outcome"] == "success"
    assert tags(sasl[0])["sasl.mechanism"] == "SCRAM-SHA-512"
    # No password in any tag of the trace.
    for s in spans.values():
        for value in tags(s).values():
            assert PORTCULLIS_USERS["alice"] not in str(value)
