#!/usr/bin/env python3
"""Copies one service's traces from Jaeger's HTTP query API into Zipkin's collector API.

    jaeger_to_zipkin.py JAEGER_QUERY_URL ZIPKIN_URL SERVICE TIMEOUT_SECONDS

scripts/trace-screenshot.sh uses it as the OTLP bridge for Zipkin: Portcullis exports OTLP to
Jaeger (which receives OTLP natively), and this posts the same spans, as Zipkin v2 JSON, to
ZIPKIN_URL/api/v2/spans, whose UI has a trace page to photograph (the Jaeger built from its Go
module serves a placeholder instead of its UI). It waits until Jaeger holds

  - a "produce" trace: a connection whose spans include `kafka Produce`, and
  - a "login" trace: a connection that logged in (`sasl.authenticate`) and produced nothing (the
    client's bootstrap connection),

each with its root `kafka.connection` span (exported when the connection closes), then prints
`produce TRACE_ID` and `login TRACE_ID`. Standard library only; loopback URLs.
"""

import json
import sys
import time
import urllib.request

KINDS = {"server": "SERVER", "client": "CLIENT", "producer": "PRODUCER", "consumer": "CONSUMER"}


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def names(trace):
    return {s["operationName"] for s in trace["spans"]}


def complete(trace):
    return any(s["operationName"] == "kafka.connection" and not s.get("references") for s in trace["spans"])


def to_zipkin(trace):
    processes = trace["processes"]
    out = []
    for s in trace["spans"]:
        tags = {t["key"]: str(t["value"]) for t in s.get("tags", [])}
        kind = KINDS.get(tags.pop("span.kind", ""))
        span = {
            "traceId": s["traceID"].rjust(32, "0"),
            "id": s["spanID"].rjust(16, "0"),
            "name": s["operationName"],
            "timestamp": s["startTime"],
            "duration": max(1, s["duration"]),
            "localEndpoint": {"serviceName": processes[s["processID"]]["serviceName"]},
            "tags": tags,
        }
        parents = [r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"]
        if parents:
            span["parentId"] = parents[0].rjust(16, "0")
        if kind:
            span["kind"] = kind
        annotations = []
        for entry in s.get("logs", []):
            fields = {f["key"]: str(f["value"]) for f in entry.get("fields", [])}
            text = fields.pop("event", "") or fields.pop("message", "")
            rest = " ".join(f"{k}={v}" for k, v in fields.items())
            annotations.append({"timestamp": entry["timestamp"], "value": " ".join(p for p in (text, rest) if p)})
        if annotations:
            span["annotations"] = annotations
        out.append(span)
    return out


def main():
    jaeger, zipkin, service, timeout = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3], float(sys.argv[4])
    deadline = time.monotonic() + timeout
    produce = login = None
    while time.monotonic() < deadline:
        data = get_json(f"{jaeger}/api/traces?service={service}&limit=100&lookback=1h")
        traces = [t for t in data.get("data") or [] if complete(t)]
        produce = next((t for t in traces if "kafka Produce" in names(t)), None)
        login = next((t for t in traces if "sasl.authenticate" in names(t) and "kafka Produce" not in names(t)), None)
        if produce and login:
            break
        time.sleep(0.5)
    else:
        sys.exit(f"jaeger_to_zipkin: after {timeout:.0f}s Jaeger has no complete produce and login traces "
                 f"of service {service}: {json.dumps(data)[:2000]}")
    spans = to_zipkin(produce) + to_zipkin(login)
    req = urllib.request.Request(f"{zipkin}/api/v2/spans", data=json.dumps(spans).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        if r.status != 202:
            sys.exit(f"jaeger_to_zipkin: Zipkin answered {r.status}")
    # Zipkin's collector stores asynchronously: wait until both traces can be read back whole.
    for trace in (produce, login):
        tid = trace["traceID"].rjust(32, "0")
        while True:
            try:
                if len(get_json(f"{zipkin}/api/v2/trace/{tid}")) == len(trace["spans"]):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                sys.exit(f"jaeger_to_zipkin: Zipkin does not show trace {tid}")
            time.sleep(0.2)
    for label, trace in (("produce", produce), ("login", login)):
        print(label, trace["traceID"].rjust(32, "0"), len(trace["spans"]), " ".join(sorted(names(trace))))


if __name__ == "__main__":
    main()
