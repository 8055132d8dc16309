"""What floods of idle, slow and failing connections cost Portcullis, and whether a legitimate
client still gets in (issue 7 §5). Run by scripts/flood.sh, which starts Kafka and a release
Portcullis and passes their addresses; prints a Markdown table.

For each scenario the flood runs in a child process (asyncio, raw sockets from source address
127.0.0.2 so it never shares a per-address limit or throttle score with the legitimate client) while
this process measures, on a steady flood:

- Portcullis' resident memory (VmRSS) before and during, and its CPU use (utime + stime) over the
  measurement;
- the legitimate client: a fresh confluent-kafka (librdkafka) producer that logs in with
  SCRAM-SHA-512 (and one with PLAIN), produces one record and waits for its acknowledgement, from
  127.0.0.1; five times, every 2 s;
- for the guessing floods, how many failed logins per second the flooders got answered, and the
  same flood against Kafka's own SASL listener for comparison.

Scenarios:
  idle-unauthenticated  N connections that connect and send nothing (kept at N: the authentication
                        deadline closes them after limits.authentication_timeout_ms, they reconnect)
  idle-authenticated    N connections that log in (PLAIN) and then send nothing
  idle-after-metadata   the same, each after one Metadata request (which opens its upstream
                        connection, as a real client's first request does)
  slow-senders          N connections that announce a 100-byte frame and send one byte of it per
                        second (kept at N: the authentication deadline closes them)
  large-frames          N connections that announce a 512 KiB frame (the pre-authentication limit)
                        and send all of it but the last KiB (kept at N): bounded by the
                        pre-authentication buffer budget
  scram-guessing        N clients sending wrong SCRAM-SHA-512 proofs as fast as they are answered
  plain-guessing        N clients sending wrong PLAIN passwords as fast as they are answered
  plain-storm           the same from a new address and for a new user name each time, so the
                        throttle never slows it: PLAIN's key derivation at full rate
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import os
import resource
import statistics
import struct
import sys
import time

from confluent_kafka import Producer

FLOOD_SOURCE = "127.0.0.2"
API_METADATA = 3
API_SASL_HANDSHAKE = 17
API_API_VERSIONS = 18
API_SASL_AUTHENTICATE = 36


# --------------------------------------------------------------------------------------------------
# Raw wire (asyncio)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    payload = struct.pack(">hhi", api_key, version, correlation_id) + _string("flood") + body
    return struct.pack(">i", len(payload)) + payload


async def _call(reader, writer, api_key: int, version: int, cid: int, body: bytes) -> bytes:
    writer.write(_request(api_key, version, cid, body))
    await writer.drain()
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return (await reader.readexactly(size))[4:]  # without the correlation id


async def _authenticate(reader, writer, cid: int, token: bytes) -> tuple[int, bytes]:
    body = await _call(reader, writer, API_SASL_AUTHENTICATE, 1, cid, struct.pack(">i", len(token)) + token)
    error = struct.unpack(">h", body[:2])[0]
    (mlen,) = struct.unpack(">h", body[2:4])
    pos = 4 + max(mlen, 0)
    (blen,) = struct.unpack(">i", body[pos:pos + 4])
    return error, body[pos + 4:pos + 4 + max(blen, 0)]


async def _connect(host: str, port: int):
    return await asyncio.open_connection(host, port, local_addr=(FLOOD_SOURCE, 0))


async def _handshake(reader, writer, mechanism: str) -> None:
    await _call(reader, writer, API_SASL_HANDSHAKE, 1, 1, _string(mechanism))


# --------------------------------------------------------------------------------------------------
# Floods (each runs in a child process until killed)


async def _keep(n: int, one) -> None:
    """Keeps `n` copies of the coroutine factory `one` running, restarting any that ends."""

    async def slot(i: int) -> None:
        while True:
            try:
                await one(i)
            except (OSError, asyncio.IncompleteReadError, ConnectionError):
                pass
            await asyncio.sleep(0.05)

    await asyncio.gather(*(slot(i) for i in range(n)))


async def _idle_unauthenticated(host, port, n, _user, _password, _counter):
    async def one(_):
        reader, writer = await _connect(host, port)
        try:
            await reader.read()  # until the server closes it
        finally:
            writer.close()

    await _keep(n, one)


async def _idle_logged_in(host, port, n, user, password, metadata: bool) -> None:
    """`n` connections (kept at n) that log in with PLAIN, with `metadata` send one Metadata
    request, and then wait until the server closes them."""

    async def one(_):
        reader, writer = await _connect(host, port)
        try:
            await _handshake(reader, writer, "PLAIN")
            error, _ = await _authenticate(reader, writer, 2, b"\0" + user.encode() + b"\0" + password.encode())
            if error != 0:
                raise OSError(f"login failed: {error}")
            if metadata:
                # Metadata v1 for no topic: the brokers and the controller, from the upstream.
                await _call(reader, writer, API_METADATA, 1, 3, struct.pack(">i", 0))
            await reader.read()
        finally:
            writer.close()

    await _keep(n, one)


async def _idle_authenticated(host, port, n, user, password, _counter):
    await _idle_logged_in(host, port, n, user, password, metadata=False)


async def _idle_after_metadata(host, port, n, user, password, _counter):
    await _idle_logged_in(host, port, n, user, password, metadata=True)


async def _held_frame(host, port, n, announced: int, sent: int, chunk: int) -> None:
    """`n` connections (kept at n) that announce a frame of `announced` bytes, send `sent` bytes of
    it at once and then `chunk` more per second, never finishing it."""

    async def one(_):
        reader, writer = await _connect(host, port)
        try:
            writer.write(struct.pack(">i", announced) + b"\0" * sent)
            while True:
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                        return  # closed by the server
                except asyncio.TimeoutError:
                    pass
                writer.write(b"\0" * chunk)
        finally:
            writer.close()

    await _keep(n, one)


async def _slow_senders(host, port, n, _user, _password, _counter):
    # A 100-byte frame (a SaslHandshake's size), one byte per second (slowloris).
    await _held_frame(host, port, n, 100, 0, 1)


async def _large_frames(host, port, n, _user, _password, _counter):
    # The largest pre-authentication frame (512 KiB), all of it but its last KiB, which never comes.
    await _held_frame(host, port, n, 512 * 1024, 511 * 1024, 0)


async def _scram_guessing(host, port, n, user, _password, counter):
    async def one(_):
        reader, writer = await _connect(host, port)
        try:
            await _handshake(reader, writer, "SCRAM-SHA-512")
            nonce = base64.b64encode(os.urandom(18)).decode()
            error, first = await _authenticate(reader, writer, 2, f"n,,n={user},r={nonce}".encode())
            attrs = dict(kv.split("=", 1) for kv in first.decode().split(","))
            proof = base64.b64encode(os.urandom(64)).decode()
            error, _ = await _authenticate(reader, writer, 3, f"c=biws,r={attrs['r']},p={proof}".encode())
            if error == 58:
                with counter.get_lock():
                    counter.value += 1
        finally:
            writer.close()

    await _keep(n, one)


async def _plain_guessing(host, port, n, user, _password, counter):
    async def one(i):
        reader, writer = await _connect(host, port)
        try:
            await _handshake(reader, writer, "PLAIN")
            token = b"\0" + user.encode() + b"\0" + f"wrong-{i}-{os.urandom(4).hex()}".encode()
            error, _ = await _authenticate(reader, writer, 2, token)
            if error == 58:
                with counter.get_lock():
                    counter.value += 1
        finally:
            writer.close()

    await _keep(n, one)


async def _plain_storm(host, port, n, _user, _password, counter):
    """Wrong PLAIN passwords for made-up user names from ever new loopback addresses, so neither
    the per-address nor the per-name throttle slows them: every attempt costs the node a PBKDF2."""

    async def one(i):
        source = f"127.{3 + i % 200}.{os.urandom(1)[0] % 254 + 1}.{os.urandom(1)[0] % 254 + 1}"
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        try:
            await _handshake(reader, writer, "PLAIN")
            name = f"storm-{os.urandom(6).hex()}"
            error, _ = await _authenticate(reader, writer, 2, b"\0" + name.encode() + b"\0wrong")
            if error == 58:
                with counter.get_lock():
                    counter.value += 1
        finally:
            writer.close()

    await _keep(n, one)


FLOODS = {
    "idle-unauthenticated": _idle_unauthenticated,
    "idle-authenticated": _idle_authenticated,
    "idle-after-metadata": _idle_after_metadata,
    "slow-senders": _slow_senders,
    "large-frames": _large_frames,
    "scram-guessing": _scram_guessing,
    "plain-guessing": _plain_guessing,
    "plain-storm": _plain_storm,
}


def _flood_process(name, host, port, n, user, password, counter) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(FLOODS[name](host, port, n, user, password, counter))


# --------------------------------------------------------------------------------------------------
# Measurements


def _rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _legit_produce(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> float:
    """Seconds for a fresh producer to log in, produce one record and get it acknowledged."""
    started = time.monotonic()
    p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                  "acks": "all", "log_level": 0, "message.timeout.ms": 30000})
    done = []
    p.produce(topic, b"legitimate", on_delivery=lambda err, _m: done.append(err))
    p.flush(30)
    took = time.monotonic() - started
    if not done or done[0] is not None:
        return float("inf")
    return took


def _measure(args, name: str | None, n: int) -> dict:
    counter = multiprocessing.Value("q", 0)
    flood = None
    rss_before = _rss_kib(args.pid)
    if name is not None:
        flood = multiprocessing.Process(target=_flood_process, daemon=True,
                                        args=(name, "127.0.0.1", args.port, n, args.user, args.password, counter))
        flood.start()
        time.sleep(args.ramp)
    fds = _open_fds(args.pid)
    cpu0, t0, guesses0 = _cpu_seconds(args.pid), time.monotonic(), counter.value
    logins = {"SCRAM-SHA-512": [], "PLAIN": []}
    peak_rss = _rss_kib(args.pid)
    for _ in range(args.samples):
        for mechanism in logins:
            logins[mechanism].append(_legit_produce(f"127.0.0.1:{args.port}", mechanism, args.user,
                                                    args.password, args.topic))
        peak_rss = max(peak_rss, _rss_kib(args.pid))
        time.sleep(2.0)
    cpu1, t1, guesses1 = _cpu_seconds(args.pid), time.monotonic(), counter.value
    if flood is not None:
        flood.kill()
        flood.join()
    result = {"scenario": name or "no flood", "connections": n, "rss_before_mib": rss_before / 1024,
              "rss_mib": peak_rss / 1024, "fds": fds, "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
              "guesses_per_s": (guesses1 - guesses0) / (t1 - t0) if name and ("guessing" in name or "storm" in name) else None}
    for mechanism, times in logins.items():
        result[f"{mechanism}_median_s"] = statistics.median(times)
        result[f"{mechanism}_max_s"] = max(times)
    if name and "guessing" in name and args.kafka_port:
        result["kafka_guesses_per_s"] = _kafka_guess_rate(args, name, n)
    time.sleep(args.settle)
    return result


def _kafka_guess_rate(args, name: str, n: int) -> float:
    counter = multiprocessing.Value("q", 0)
    flood = multiprocessing.Process(target=_flood_process, daemon=True,
                                    args=(name, "127.0.0.1", args.kafka_port, n, args.kafka_user, "", counter))
    flood.start()
    time.sleep(args.ramp)
    g0, t0 = counter.value, time.monotonic()
    time.sleep(args.samples * 2.0)
    g1, t1 = counter.value, time.monotonic()
    flood.kill()
    flood.join()
    return (g1 - g0) / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True, help="Portcullis' bootstrap port")
    ap.add_argument("--pid", type=int, required=True, help="Portcullis' process id")
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--kafka-port", type=int, help="Kafka's SASL_PLAINTEXT port, for the guessing rate")
    ap.add_argument("--kafka-bootstrap", help="Kafka's PLAINTEXT address, to create the topic")
    ap.add_argument("--kafka-user", default="alice")
    ap.add_argument("--scenarios", default="idle-unauthenticated:5000,idle-authenticated:5000,"
                    "slow-senders:2000,large-frames:500,scram-guessing:50,plain-guessing:50,plain-storm:50")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--ramp", type=float, default=8.0, help="seconds for a flood to build up")
    ap.add_argument("--settle", type=float, default=12.0, help="seconds after a flood before the next")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--no-baseline", action="store_true", help="do not measure without a flood first")
    ap.add_argument("--header", action="store_true", help="print the table's header")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.kafka_bootstrap:
        from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

        from confluent_kafka import KafkaError, KafkaException  # noqa: PLC0415

        admin = AdminClient({"bootstrap.servers": args.kafka_bootstrap})
        for f in admin.create_topics([NewTopic(args.topic, num_partitions=1, replication_factor=1)]).values():
            try:
                f.result(60)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    results = [] if args.no_baseline else [_measure(args, None, 0)]
    for item in args.scenarios.split(","):
        name, _, n = item.partition(":")
        print(f"flood: {name} x {n}", file=sys.stderr, flush=True)
        results.append(_measure(args, name, int(n)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if args.header:
        print("| scenario | flood | Portcullis RSS before → during (MiB) | its open fds | its CPU | legitimate SCRAM-SHA-512 login + produce, median / max (s) | the same with PLAIN (s) | failed logins answered per s: Portcullis / Kafka |")
        print("|---|---|---|---|---|---|---|---|")
    for r in results:
        kafka = r.get("kafka_guesses_per_s")
        guesses = "" if r["guesses_per_s"] is None else (
            f"{r['guesses_per_s']:.1f} / " + ("—" if kafka is None else f"{kafka:.1f}"))
        print(f"| {r['scenario']} | {r['connections']} | {r['rss_before_mib']:.0f} → {r['rss_mib']:.0f} | {r['fds']} "
              f"| {r['cpu_percent']:.0f} % | {r['SCRAM-SHA-512_median_s']:.3f} / {r['SCRAM-SHA-512_max_s']:.3f} "
              f"| {r['PLAIN_median_s']:.3f} / {r['PLAIN_max_s']:.3f} | {guesses} |")


if __name__ == "__main__":
    main()
