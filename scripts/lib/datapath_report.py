#!/usr/bin/env python3
"""Parses the outputs of scripts/bench-datapath.sh runs and prints its report.

  datapath_report.py parse --case C --target T --round R --rc N --out F --err F ...  > run.json
  datapath_report.py report RUN_DIR      # markdown on stdout
  datapath_report.py check RUN_DIR       # exit 1 if any run had an error

A run has an error when the tool exited non-zero, printed an ERROR log line or an exception,
had a request time out (the network client's INFO line), moved fewer records than asked, or
(latency probe) lost or failed a record.

Throughput cases: `consume` and `produce-b<batch>-acks<acks>` (Kafka's ConsumerPerformance and
ProducerPerformance, one client) and the same with a suffix `-c<N>` (DatapathTool consume-many /
produce-many, N clients, each with its own connections).
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

GIB = 1 << 30
# The Kafka side: the SASL listener straight; every other target is a Portcullis node, or a bare
# relay (relay-<mode>, --relay-floor) whose CPU and switches fill the Portcullis fields.
REFERENCE = "kafka"
# A throughput case and its number of client connections: consume, consume-c4,
# produce-b16384-acks1, produce-b16384-acks1-c50.
THROUGHPUT = re.compile(r"^(consume|produce-b\d+-acks-?\w+)(?:-c(\d+))?$")


def is_throughput(case):
    return THROUGHPUT.match(case) is not None


def case_order(case):
    """Cases sorted by name, the -c<N> variants after the one-client case in increasing N."""
    m = THROUGHPUT.match(case)
    return (m.group(1), int(m.group(2) or 1)) if m else (case, 0)


def error_lines(text):
    out = []
    for line in text.splitlines():
        if (re.search(r"\bERROR\b", line) or re.search(r"[A-Za-z]+Exception\b", line)
                or "due to request timeout" in line):
            out.append(line.strip()[:300])
    return out


# The Kafka client's own metrics, as --print-metrics prints them at the end of a single-client run
# (`group:name:{client-id=...}  : value`; only the client-wide ones, not per node or topic).
CLIENT_METRIC = re.compile(
    r"^(consumer-fetch-manager-metrics|producer-metrics):([\w-]+):\{client-id=[^,}]*\}\s*:\s*([\d.]+)$",
    re.M,
)
CLIENT_METRICS = {
    "fetch-latency-avg": "fetch_latency_avg_ms",
    "fetch-size-avg": "fetch_size_avg",
    "fetch-total": "fetch_total",
    "request-latency-avg": "request_latency_avg_ms",
    "request-total": "request_total",
    "batch-size-avg": "batch_size_avg",
    "record-queue-time-avg": "record_queue_time_avg_ms",
}


def client_metrics(out):
    """What the client measured of its own requests: the time from sending a Fetch or Produce to
    its response, their number and sizes."""
    found = {}
    for _group, name, value in CLIENT_METRIC.findall(out):
        if name in CLIENT_METRICS:
            found[CLIENT_METRICS[name]] = float(value)
    return found


def parse_consume(out, records):
    lines = [l for l in out.splitlines() if l.strip()]
    header = next((l for l in lines if l.startswith("start.time")), None)
    if header is None:
        raise ValueError("no ConsumerPerformance header")
    names = [h.strip() for h in header.split(",")]
    data = lines[lines.index(header) + 1]
    values = dict(zip(names, (v.strip() for v in data.split(","))))
    consumed = int(float(values["data.consumed.in.nMsg"]))
    metrics = {
        "mb_per_s": float(values["fetch.MB.sec"]),
        "msg_per_s": float(values["fetch.nMsg.sec"]),
        "records": consumed,
        "rebalance_ms": float(values["rebalance.time.ms"]),
        "fetch_ms": float(values["fetch.time.ms"]),
        **client_metrics(out),
    }
    errors = [] if consumed == records else [f"consumed {consumed} of {records} records"]
    return metrics, errors


PRODUCE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def parse_produce(out, records):
    found = PRODUCE.findall(out)
    if not found:
        raise ValueError("no ProducerPerformance summary")
    sent, rps, mbps, avg, mx, p50, p95, p99, p999 = found[-1]
    metrics = {
        "mb_per_s": float(mbps),
        "msg_per_s": float(rps),
        "records": int(sent),
        "latency_avg_ms": float(avg),
        "latency_p50_ms": int(p50),
        "latency_p99_ms": int(p99),
        **client_metrics(out),
    }
    errors = [] if int(sent) == records else [f"sent {sent} of {records} records"]
    return metrics, errors


def parse_many(out, records):
    """DatapathTool produce-many / consume-many: one JSON line."""
    line = next((l for l in out.splitlines() if l.startswith("{")), None)
    if line is None:
        raise ValueError("no produce-many / consume-many JSON")
    r = json.loads(line)
    metrics = {k: r[k] for k in ("mb_per_s", "msg_per_s", "records", "seconds") if k in r}
    if "rebalance_ms" in r:
        metrics["rebalance_ms"] = r["rebalance_ms"]
    errors = []
    if r.get("errors"):
        errors.append(f"{r['errors']} send errors")
    if r["records"] != records:
        errors.append(f"moved {r['records']} of {records} records")
    return metrics, errors


def parse_latency(out):
    line = next((l for l in out.splitlines() if l.startswith("{")), None)
    if line is None:
        raise ValueError("no latency JSON")
    r = json.loads(line)
    errors = []
    if not r["ok"]:
        errors.append(
            f"latency probe: {r['missing']} missing, {r['send_errors']} send errors"
            + (f", {r['error']}" if "error" in r else "")
        )
    metrics = {
        "p50_us": r["e2e_us"]["p50"],
        "p99_us": r["e2e_us"]["p99"],
        "p999_us": r["e2e_us"]["p999"],
        "max_us": r["e2e_us"]["max"],
        "ack_p50_us": r["ack_us"]["p50"],
        "ack_p99_us": r["ack_us"]["p99"],
        "late_sends": r["late_sends"],
        "measured": r["measured"],
        "duplicates": r["duplicates"],
    }
    return metrics, errors


def parse_load(out):
    """latency-load: what the load beside the probe carried (LOAD-* lines after its JSON)."""
    want = re.search(r"^LOAD-RECORDS (\d+)$", out, re.M)
    rate = re.search(r"^LOAD-RATE (\d+)$", out, re.M)
    if not want or not rate:
        raise ValueError("no LOAD-RECORDS / LOAD-RATE line")
    want, rate = int(want.group(1)), int(rate.group(1))
    produce = "\n".join(l[len("LOAD-PRODUCE "):] for l in out.splitlines() if l.startswith("LOAD-PRODUCE "))
    consume = "\n".join(l[len("LOAD-CONSUME "):] for l in out.splitlines() if l.startswith("LOAD-CONSUME "))
    p, p_errors = parse_produce(produce, want)
    c, c_errors = parse_consume(consume, want)
    metrics = {
        "load_records": want,
        "load_rate": rate,
        "load_produce_rps": p["msg_per_s"],
        "load_produce_mb_per_s": p["mb_per_s"],
        "load_consume_records": c["records"],
    }
    errors = p_errors + c_errors
    # The producer's average over its whole run (start-up included): a target that could not
    # carry the load shows here.
    if p["msg_per_s"] < 0.9 * rate:
        errors.append(f"carried {p['msg_per_s']:.0f} of the {rate} records/s asked")
    return metrics, [f"load: {e}" for e in errors]


def parse_e2e(out):
    avg = re.search(r"Avg latency: ([\d.]+) ms", out)
    pct = re.search(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)", out)
    if not avg or not pct:
        raise ValueError("no EndToEndLatency summary")
    return {
        "avg_ms": float(avg.group(1)),
        "p50_ms": int(pct.group(1)),
        "p99_ms": int(pct.group(2)),
        "p999_ms": int(pct.group(3)),
    }, []


def cmd_parse(a):
    out = open(a.out, errors="replace").read()
    err = open(a.err, errors="replace").read()
    errors = []
    if a.rc != 0:
        errors.append(f"exit code {a.rc}")
    errors += error_lines(out + "\n" + err)[:5]
    metrics = {}
    try:
        many = THROUGHPUT.match(a.case)
        if many and many.group(2):
            metrics, e = parse_many(out, a.records)
        elif a.case == "consume":
            metrics, e = parse_consume(out, a.records)
        elif a.case.startswith("produce"):
            metrics, e = parse_produce(out, a.records)
        elif a.case == "latency":
            metrics, e = parse_latency(out)
        elif a.case == "latency-load":
            metrics, e = parse_latency(out)
            errors += e
            load_metrics, e = parse_load(out)
            metrics.update(load_metrics, record_size=a.record_size)
        elif a.case == "e2e":
            metrics, e = parse_e2e(out)
        else:
            raise ValueError(f"unknown case {a.case}")
        errors += e
    except (ValueError, KeyError, IndexError) as e:
        errors.append(f"cannot parse the output: {e}")
    moved = a.records * a.record_size if is_throughput(a.case) else 0
    result = {
        "case": a.case,
        "target": a.target,
        "round": a.round,
        "metrics": metrics,
        "errors": errors,
        "kafka_cpu_s": a.kafka_cpu_ticks / a.hz,
        "portcullis_cpu_s": a.portcullis_cpu_ticks / a.hz,
        # Its user-space part (the rest is the kernel's work for it).
        "portcullis_user_s": a.portcullis_user_ticks / a.hz,
        "client_cpu_s": a.client_cpu_ticks / a.hz,
        # Context switches summed over the process' threads (see the report's wake-ups/GiB).
        "portcullis_voluntary_switches": a.portcullis_voluntary,
        "portcullis_involuntary_switches": a.portcullis_involuntary,
        "kafka_voluntary_switches": a.kafka_voluntary,
        "kafka_involuntary_switches": a.kafka_involuntary,
        "machine_busy_pct": percent(a.machine_busy_ticks, a),
        "machine_steal_pct": percent(a.machine_steal_ticks, a),
        "bytes_moved": moved,
        "wall_s": a.wall,
        "load_before": a.load_before,
        "load_after": a.load_after,
    }
    json.dump(result, sys.stdout, indent=2)
    print()


def percent(ticks, a):
    """`ticks` as a share of every CPU tick of the machine during the run."""
    total = a.machine_busy_ticks + a.machine_idle_ticks + a.machine_steal_ticks
    return 100.0 * ticks / total if total > 0 else 0.0


def load(run):
    return [json.load(open(f)) for f in sorted(glob.glob(os.path.join(run, "results", "*.json")))]


def spread(values, fmt="{:.2f}"):
    if not values:
        return "-"
    values = sorted(values)
    return " / ".join(fmt.format(v) for v in (values[0], statistics.median(values), values[-1]))


def med(values, fmt="{:.2f}"):
    return fmt.format(statistics.median(values)) if values else "-"


def load_range(rows):
    ones = [float(r["load_before"].split()[0]) for r in rows]
    return f"{min(ones):.1f}–{max(ones):.1f}" if ones else "-"


def telemetry_ab(by, throughput, targets, ok):
    """--telemetry: each `otel-X` node (exporting every span to Jaeger) against its twin `X`
    (telemetry disabled), per round."""
    pairs = [(t, t[len("otel-"):]) for t in targets if t.startswith("otel-") and t[len("otel-"):] in targets]
    if not pairs:
        return
    print("## Telemetry exporting ÷ disabled, same run\n")
    print("Per round: the exporting node's MB/s over its disabled twin's in the same round, and its "
          "Portcullis CPU s/GiB over the twin's; min / median / max over rounds.\n")
    print("| case | nodes | MB/s disabled / exporting (median) | throughput ratio min / median / max | CPU ratio min / median / max |")
    print("|---|---|---|---|---|")
    for case in throughput:
        for otel, plain in pairs:
            a_runs, b_runs = by[case].get(plain, {}), by[case].get(otel, {})
            rounds = [n for n in b_runs if ok(b_runs[n]) and ok(a_runs.get(n))]
            tput = [b_runs[n]["metrics"]["mb_per_s"] / a_runs[n]["metrics"]["mb_per_s"]
                    for n in rounds if a_runs[n]["metrics"]["mb_per_s"] > 0]
            cpu = [(b_runs[n]["portcullis_cpu_s"] / b_runs[n]["bytes_moved"])
                   / (a_runs[n]["portcullis_cpu_s"] / a_runs[n]["bytes_moved"])
                   for n in rounds
                   if b_runs[n]["bytes_moved"] and a_runs[n]["bytes_moved"] and a_runs[n]["portcullis_cpu_s"] > 0]
            print(f"| {case} | {otel} vs {plain} | "
                  f"{med([a_runs[n]['metrics']['mb_per_s'] for n in rounds], '{:.1f}')} / "
                  f"{med([b_runs[n]['metrics']['mb_per_s'] for n in rounds], '{:.1f}')} | "
                  f"{spread(tput, '{:.3f}')} | {spread(cpu, '{:.3f}')} |")
    print()


def client_view(by, throughput, targets, ok):
    """Single-client cases: each request's time as the client saw it, through each target."""
    cases = [c for c in throughput if not THROUGHPUT.match(c).group(2)
             and any("fetch_latency_avg_ms" in r["metrics"] or "request_latency_avg_ms" in r["metrics"]
                     for runs in by[c].values() for r in runs.values())]
    if not cases:
        return
    print("## The client's requests (Kafka client metrics, single-client cases)\n")
    print("The client's own average time from sending a Fetch (consume) or Produce to its response, "
          "median over rounds, and per round the target's minus Kafka's (min / median / max). "
          "\"requests\" counts Fetch requests (consume) or every request the producer sent; "
          "\"avg size\" is a Fetch response's or a record batch's. For consume, \"explains\" sums "
          "over the rounds paired with Kafka's the fetch time the target added (average × count, "
          "target minus Kafka) and divides it by how much longer the target's fetch phases took: "
          "near 100 % means the throughput gap is the time each Fetch spends in Portcullis, one "
          "Fetch after another (n/a when the gap is within 2 % of Kafka's fetch time). The "
          "client's averages cover its last 30–60 s, which is the whole run at these sizes. "
          "Producers keep up to five requests in flight, so for them no such share is given.\n")
    print("| case | target | request avg ms | added per request ms | requests | avg size KiB | explains |")
    print("|---|---|---:|---|---:|---:|---:|")
    for case in cases:
        ref = by[case].get(REFERENCE, {})
        consume = case == "consume"
        lat = "fetch_latency_avg_ms" if consume else "request_latency_avg_ms"
        count = "fetch_total" if consume else "request_total"
        size = "fetch_size_avg" if consume else "batch_size_avg"
        for target in targets:
            runs = by[case].get(target, {})
            good = [r for r in runs.values() if ok(r) and lat in r["metrics"]]
            paired = [(r, ref[n]) for n, r in runs.items()
                      if ok(r) and ok(ref.get(n)) and lat in r["metrics"] and lat in ref[n]["metrics"]]
            added = [r["metrics"][lat] - k["metrics"][lat] for r, k in paired]
            explains = "—"
            if consume and target != REFERENCE and paired:
                # Over every paired round: the fetch time the target added in all, over how much
                # longer its fetch phases took. A gap within 2 % of Kafka's is noise: no share.
                added_ms = sum(r["metrics"][lat] * r["metrics"].get(count, 0)
                               - k["metrics"][lat] * k["metrics"].get(count, 0) for r, k in paired)
                gap_ms = sum(r["metrics"]["fetch_ms"] - k["metrics"]["fetch_ms"] for r, k in paired)
                kafka_ms = sum(k["metrics"]["fetch_ms"] for _, k in paired)
                explains = (f"{100 * added_ms / gap_ms:.0f} % ({len(paired)} rounds)"
                            if gap_ms > 0.02 * kafka_ms else f"n/a: gap {gap_ms:+.0f} ms")
            print(f"| {case} | {target} | {med([r['metrics'][lat] for r in good], '{:.3f}')} | "
                  f"{'—' if target == REFERENCE else spread(added, '{:+.3f}')} | "
                  f"{med([r['metrics'].get(count, 0) for r in good], '{:,.0f}')} | "
                  f"{med([r['metrics'].get(size, 0) / 1024 for r in good], '{:,.0f}')} | "
                  f"{explains} |")
    print()


def latency_table(case, by_target, targets, ok):
    under_load = case == "latency-load"
    if under_load:
        print("## Added latency under load (open-loop probe, end to end, same run)\n")
        print("The probe ran while the same target carried the load named under \"Machine and run\" "
              "(a throttled producer and a consumer reading its records, at a share of the round's "
              "direct produce throughput); \"load MB/s\" is what the load's producer was asked to "
              "send and what it sent (ProducerPerformance's MB/s, 2^20 bytes), median over rounds.\n")
    else:
        print("## Added latency at a fixed rate (open-loop probe, end to end, same run)\n")
    print("Per round: the target's percentile minus Kafka's in the same round, in ms, shown as "
          "min / median / max. Absolute values are medians over rounds, in µs.\n")
    extra = " load MB/s asked / carried |" if under_load else ""
    print(f"| target | p50 µs | p99 µs | p99.9 µs | ack p50 µs | added p50 ms | added p99 ms |{extra} machine busy | load (1 min) |")
    print("|---|---:|---:|---:|---:|---|---|" + ("---:|" if under_load else "") + "---:|---|")
    ref = by_target.get(REFERENCE, {})
    for target in targets:
        runs = by_target.get(target, {})
        good = [r for r in runs.values() if ok(r)]
        m = lambda k, fmt="{:.0f}": med([r["metrics"][k] for r in good], fmt)
        added = lambda k: spread([
            (r["metrics"][k] - ref[n]["metrics"][k]) / 1000
            for n, r in runs.items() if ok(r) and ok(ref.get(n))
        ], "{:+.3f}")
        busy = med([r.get("machine_busy_pct", 0) for r in good], "{:.0f} %")
        print(f"| {target} | {m('p50_us')} | {m('p99_us')} | {m('p999_us')} | {m('ack_p50_us')} | "
              f"{'—' if target == REFERENCE else added('p50_us')} | "
              f"{'—' if target == REFERENCE else added('p99_us')} |"
              + (f" {med([r['metrics']['load_rate'] * r['metrics'].get('record_size', 1024) / (1 << 20) for r in good], '{:.1f}')}"
                 f" / {m('load_produce_mb_per_s', '{:.1f}')} |" if under_load else "")
              + f" {busy} | {load_range(list(runs.values()))} |")
    print()


def cmd_report(a):
    rows = load(a.run)
    print("## Machine and run\n\n```")
    print(open(os.path.join(a.run, "machine.txt")).read().rstrip())
    print("```\n")
    targets = []
    for r in rows:
        if r["target"] not in targets:
            targets.append(r["target"])
    targets.sort(key=lambda t: (t != REFERENCE, t))
    by = {}
    for r in rows:
        by.setdefault(r["case"], {}).setdefault(r["target"], {})[r["round"]] = r

    def ok(r):
        return r is not None and not r["errors"] and r["metrics"]

    throughput = sorted((c for c in by if is_throughput(c)), key=case_order)
    if throughput:
        print("## Throughput: Portcullis ÷ Kafka, same run\n")
        print("Ratios are per round (the target's MB/s over Kafka's in the same round), shown as "
              "min / median / max. CPU is seconds per GiB of record payload moved, median over rounds; "
              "\"Kafka CPU\" is the broker JVM during that target's run, \"of which user\" the part of "
              "Portcullis' CPU spent in user space (utime: its code, tokio's and the C library's; the rest "
              "is the kernel's work for it: system calls, copies, wake-ups), \"client CPU\" the tool's JVM; "
              "\"machine busy\" is the share of all the machine's CPU time in use during the run "
              "(100 % = every core busy), median over rounds. Wake-ups/GiB are the voluntary context "
              "switches of all the server's threads during the run (a thread that blocks, e.g. in "
              "epoll_wait or on a futex, and needs a wake-up to go on) per GiB moved, median over "
              "rounds; involuntary switches (preemptions) are in \"Every run\". Cases with a suffix "
              "-c<N> run N clients, each with its own connections."
              + (" Targets relay-<mode> are bare byte relays (benches/relay-io, --relay-floor): "
                 "their CPU and wake-ups are in the Portcullis columns."
                 if any(t.startswith("relay-") for t in targets) else "") + "\n")
        print("| case | target | MB/s (median) | ratio min / median / max | Kafka CPU s/GiB | Portcullis CPU s/GiB | of which user | client CPU s/GiB | Kafka wake-ups/GiB | Portcullis wake-ups/GiB | machine busy | load (1 min) |")
        print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for case in throughput:
            ref = by[case].get(REFERENCE, {})
            for target in targets:
                runs = by[case].get(target, {})
                good = [r for r in runs.values() if ok(r)]
                mbps = [r["metrics"]["mb_per_s"] for r in good]
                ratios = [
                    r["metrics"]["mb_per_s"] / ref[n]["metrics"]["mb_per_s"]
                    for n, r in runs.items()
                    if ok(r) and ok(ref.get(n)) and ref[n]["metrics"]["mb_per_s"] > 0
                ]
                kcpu = [r["kafka_cpu_s"] / (r["bytes_moved"] / GIB) for r in good if r["bytes_moved"]]
                pcpu = [r["portcullis_cpu_s"] / (r["bytes_moved"] / GIB) for r in good if r["bytes_moved"]]
                # Runs recorded before the user time was read have none: "-" rather than 0.
                puser = [r["portcullis_user_s"] / (r["bytes_moved"] / GIB) for r in good
                         if r["bytes_moved"] and "portcullis_user_s" in r]
                ccpu = [r.get("client_cpu_s", 0) / (r["bytes_moved"] / GIB) for r in good if r["bytes_moved"]]
                kwake = [r.get("kafka_voluntary_switches", 0) / (r["bytes_moved"] / GIB) for r in good if r["bytes_moved"]]
                pwake = [r.get("portcullis_voluntary_switches", 0) / (r["bytes_moved"] / GIB) for r in good if r["bytes_moved"]]
                busy = [r.get("machine_busy_pct", 0) for r in good]
                print(f"| {case} | {target} | {med(mbps, '{:.1f}')} | "
                      f"{'—' if target == REFERENCE else spread(ratios)} | {med(kcpu)} | "
                      f"{'—' if target == REFERENCE else med(pcpu)} | "
                      f"{'—' if target == REFERENCE else med(puser)} | {med(ccpu)} | {med(kwake, '{:,.0f}')} | "
                      f"{'—' if target == REFERENCE else med(pwake, '{:,.0f}')} | "
                      f"{med(busy, '{:.0f} %')} | {load_range(list(runs.values()))} |")
        print()
        telemetry_ab(by, throughput, targets, ok)

    client_view(by, throughput, targets, ok)

    for case in ("latency", "latency-load"):
        if case in by:
            latency_table(case, by[case], targets, ok)

    if "e2e" in by:
        print("## EndToEndLatency (Kafka's tool: closed loop, one record at a time, acks=1)\n")
        print("Its percentiles are whole milliseconds; the average has four decimals.\n")
        print("| target | avg ms (median) | p50 / p99 / p99.9 ms (median) | added avg ms min / median / max |")
        print("|---|---:|---|---|")
        ref = by["e2e"].get(REFERENCE, {})
        for target in targets:
            runs = by["e2e"].get(target, {})
            good = [r for r in runs.values() if ok(r)]
            pcts = " / ".join(med([r["metrics"][k] for r in good], "{:.0f}") for k in ("p50_ms", "p99_ms", "p999_ms"))
            added = spread([
                r["metrics"]["avg_ms"] - ref[n]["metrics"]["avg_ms"]
                for n, r in runs.items() if ok(r) and ok(ref.get(n))
            ], "{:+.3f}")
            print(f"| {target} | {med([r['metrics']['avg_ms'] for r in good], '{:.3f}')} | {pcts} | "
                  f"{'—' if target == REFERENCE else added} |")
        print()

    print("## Every run\n")
    print("| case | round | target | result | Kafka CPU s | Portcullis CPU s | client CPU s | Kafka switches vol / invol | Portcullis switches vol / invol | machine busy / steal | wall s | load before |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---|")
    for r in sorted(rows, key=lambda r: (case_order(r["case"]), r["round"], r["target"])):
        m = r["metrics"]
        if r["case"].startswith("latency") and m:
            res = f"p50 {m['p50_us']:.0f} µs, p99 {m['p99_us']:.0f} µs"
            if "load_produce_mb_per_s" in m:
                res += f", load {m['load_produce_mb_per_s']:.1f} MB/s"
        elif r["case"] == "e2e" and m:
            res = f"avg {m['avg_ms']:.3f} ms"
        elif m:
            res = f"{m['mb_per_s']:.1f} MB/s"
        else:
            res = "-"
        if r["errors"]:
            res += " **ERROR**"
        print(f"| {r['case']} | {r['round']} | {r['target']} | {res} | {r['kafka_cpu_s']:.2f} | "
              f"{r['portcullis_cpu_s']:.2f} | {r.get('client_cpu_s', 0):.2f} | "
              f"{r.get('kafka_voluntary_switches', 0):,} / {r.get('kafka_involuntary_switches', 0):,} | "
              f"{r.get('portcullis_voluntary_switches', 0):,} / {r.get('portcullis_involuntary_switches', 0):,} | "
              f"{r.get('machine_busy_pct', 0):.0f} % / {r.get('machine_steal_pct', 0):.0f} % | "
              f"{r['wall_s']:.1f} | {r['load_before']} |")
    print()
    bad = [r for r in rows if r["errors"]]
    if bad:
        print("## Errors\n")
        for r in bad:
            print(f"- {r['case']} round {r['round']} {r['target']}: " + "; ".join(r["errors"]))
        print()


def cmd_check(a):
    bad = [r for r in load(a.run) if r["errors"]]
    # Every run's output but the topic fills' (fill.out, fill-c<N>.out), which have no result.
    expected = len([f for f in glob.glob(os.path.join(a.run, "logs", "*.out"))
                    if not os.path.basename(f).startswith("fill")])
    if len(load(a.run)) != expected:
        print(f"{expected - len(load(a.run))} run(s) without a result", file=sys.stderr)
        return 1
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("parse")
    s.add_argument("--case", required=True)
    s.add_argument("--target", required=True)
    s.add_argument("--round", type=int, required=True)
    s.add_argument("--rc", type=int, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--err", required=True)
    s.add_argument("--kafka-cpu-ticks", type=int, required=True)
    s.add_argument("--portcullis-cpu-ticks", type=int, required=True)
    s.add_argument("--portcullis-user-ticks", type=int, default=0)
    s.add_argument("--hz", type=int, required=True)
    s.add_argument("--client-cpu-ticks", type=int, default=0)
    s.add_argument("--machine-busy-ticks", type=int, default=0)
    s.add_argument("--machine-idle-ticks", type=int, default=0)
    s.add_argument("--machine-steal-ticks", type=int, default=0)
    s.add_argument("--portcullis-voluntary", type=int, default=0)
    s.add_argument("--portcullis-involuntary", type=int, default=0)
    s.add_argument("--kafka-voluntary", type=int, default=0)
    s.add_argument("--kafka-involuntary", type=int, default=0)
    s.add_argument("--wall", type=float, required=True)
    s.add_argument("--records", type=int, required=True)
    s.add_argument("--record-size", type=int, required=True)
    s.add_argument("--load-before", required=True)
    s.add_argument("--load-after", required=True)
    for name in ("report", "check"):
        s = sub.add_parser(name)
        s.add_argument("run")
    a = p.parse_args()
    if a.cmd == "parse":
        cmd_parse(a)
        return 0
    if a.cmd == "report":
        cmd_report(a)
        return 0
    return cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
