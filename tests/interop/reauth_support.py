"""Shared pieces of the KIP-368 re-authentication tests (test_reauth.py, test_upstream_reauth.py).

- `start_portcullis`: a dedicated Portcullis with extra config (re-authentication, a Prometheus
  admin endpoint, an upstream of the test's choice), started and stopped through the session's
  `launcher` like every other instance.
- `read_metrics` / `wait_metrics`: the security counters scraped from its `/metrics` (prometheus.py).
- `ConnectionTracker`: which TCP connections a process holds (the kernel's socket list from `ss`,
  matched against /proc/<pid>/fd), sampled every 100 ms, so a test can tell how many connections
  a client opened and how long each one lived without trusting the process under test to report it.
- `ReauthConn`: the raw-wire client of kafka_wire.py plus SaslAuthenticate v1 (which carries
  SessionLifetimeMs) and a PLAIN login that can be repeated on the same connection.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import PORTCULLIS_USERS, Launcher, PortcullisProcess, free_ports
from prometheus import MetricsEndpoint, security_counters
from kafka_wire import (API_SASL_AUTHENTICATE, ERROR_NONE, Conn, byte_array, plain_token)

ERROR_ILLEGAL_SASL_STATE = 34
API_FETCH = 1

SS = shutil.which("ss")  # iproute2; /proc/net/tcp is the (slow) fallback

# The security counters (prometheus.COUNTERS) the tests compare.
METRIC_NAMES = (
    "successful_authentication",
    "failed_authentication",
    "successful_reauthentication",
    "failed_reauthentication",
    "expired_connections_killed",
    "revoked_connections_closed",
)


# --------------------------------------------------------------------------------------------------
# A Portcullis with extra configuration


def reauth_kafka_bootstrap() -> str:
    """Kafka's REAUTH listener (scripts/lib/kafka.sh: SASL_PLAINTEXT, connections.max.reauth.ms)."""
    addr = os.environ.get("KAFKA_SASL_REAUTH_BOOTSTRAP")
    if not addr:
        raise RuntimeError(
            "KAFKA_SASL_REAUTH_BOOTSTRAP is not set: the suite's Kafka must be started by "
            "scripts/lib/kafka.sh with KAFKA_REAUTH_MS > 0 (the default)"
        )
    return addr


def start_portcullis(
    launcher: Launcher,
    name: str,
    *,
    listener: dict[str, int | str] | None = None,
    reauth_ms_by_mechanism: dict[str, int] | None = None,
    metrics_interval_ms: int = 500,
    upstream: dict[str, object] | None = None,
    extra_sections: dict[str, dict[str, object]] | None = None,
) -> tuple[PortcullisProcess, Path]:
    """Starts a Portcullis like `launcher.start(name)` (same users, PLAINTEXT upstream unless
    `upstream` replaces the `[upstream]` table), with `listener` keys added to `[listener]`, an
    optional `[listener.connections_max_reauth_ms_by_mechanism]` table, `extra_sections` (e.g.
    `{"limits": {"max_connections": 4}}`) and a Prometheus admin endpoint.
    Returns the process and its metrics endpoint."""
    workdir = launcher.run_dir / f"portcullis-{name}"
    workdir.mkdir(parents=True, exist_ok=False)
    plugin_dir = workdir / "plugins"
    plugin_dir.mkdir()
    (admin_port,) = free_ports(1)
    metrics = MetricsEndpoint(f"127.0.0.1:{admin_port}")
    if upstream is None:
        upstream = {"bootstrap_servers": [launcher.kafka["KAFKA_BOOTSTRAP"]], "security_protocol": "PLAINTEXT"}
    p = PortcullisProcess(launcher.binary, workdir, name)
    p.write_config(upstream=upstream, tls=None, plugin_dir=plugin_dir,
                   kafka_like_failure_delay="limits.failed_authentication" not in (extra_sections or {}))
    text = p.config.read_text()
    extra = "".join(f"{k} = {_toml(v)}\n" for k, v in (listener or {}).items())
    if text.count("\n[listener]\n") != 1:
        raise RuntimeError(f"unexpected config layout in {p.config}")
    text = text.replace("\n[listener]\n", "\n[listener]\n" + extra, 1)
    if reauth_ms_by_mechanism:
        text += "\n[listener.connections_max_reauth_ms_by_mechanism]\n"
        text += "".join(f"{_toml(m)} = {v}\n" for m, v in reauth_ms_by_mechanism.items())
    sections = dict(extra_sections or {})
    sections["telemetry"] = {"prometheus_address": metrics.address, **sections.get("telemetry", {})}
    for section, keys in sections.items():
        text += f"\n[{section}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in keys.items())
    del metrics_interval_ms  # scraping is always current
    p.config.write_text(text)
    for user, password in PORTCULLIS_USERS.items():
        p.scram_add(user, password, "SCRAM-SHA-512")
        p.scram_add(user, password, "SCRAM-SHA-256")
    p.start()
    launcher.processes.append(p)
    return p, metrics


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


# --------------------------------------------------------------------------------------------------
# Security counters


def read_metrics(path: MetricsEndpoint) -> dict[str, int]:
    """The security counters, scraped now from the admin endpoint."""
    return security_counters(path)


def fresh_metrics(path: MetricsEndpoint, interval_ms: int = 500, timeout: float = 10.0) -> dict[str, int]:
    """Counters that cover everything that happened before this call (a scrape is always current)."""
    del interval_ms, timeout
    return read_metrics(path)


def wait_metrics(path: Path, predicate, timeout: float, what: str) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    last: dict[str, int] | None = None
    while time.monotonic() < deadline:
        try:
            last = read_metrics(path)
        except (AssertionError, OSError):
            last = None
        if last is not None and predicate(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached within {timeout}s; last scrape {last}")


class CountsChange:
    """`with CountsChange(file, failed_reauthentication=1): ...` asserts that the counters changed by
    exactly these amounts over the block (and the other named counters by nothing). No file: no check
    (a listener without Portcullis' counters, e.g. Kafka's)."""

    def __init__(self, path: Path | None, **deltas: int):
        self.path = path
        self.deltas = {n: deltas.get(n, 0) for n in METRIC_NAMES if n != "revoked_connections_closed"}
        unknown = set(deltas) - set(METRIC_NAMES)
        if unknown:
            raise ValueError(f"unknown counters {unknown}")

    def __enter__(self) -> "CountsChange":
        if self.path is not None:
            self.before = fresh_metrics(self.path)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self.path is None or exc_type is not None:
            return

        def changes(m: dict[str, int]) -> dict[str, int]:
            return {n: m[n] - self.before[n] for n in self.deltas}

        # Counted when the connection's outcome is decided, which may trail the client's view a bit.
        wait_metrics(self.path, lambda m: changes(m) == self.deltas, 5.0,
                     f"counter changes {self.deltas} (before {self.before})")


# --------------------------------------------------------------------------------------------------
# TCP connections of a process (ss + /proc/<pid>/fd)


@dataclass
class TrackedConnection:
    local: tuple[str, int]
    remote: tuple[str, int]
    first_seen: float
    last_seen: float

    @property
    def lifetime(self) -> float:
        return self.last_seen - self.first_seen


def _decode_addr(hex_addr: str) -> tuple[str, int]:
    ip_hex, port_hex = hex_addr.split(":")
    if len(ip_hex) != 8:  # IPv6 rows are not used by the loopback-only suite
        return ip_hex, int(port_hex, 16)
    ip = ".".join(str(b) for b in reversed(bytes.fromhex(ip_hex)))
    return ip, int(port_hex, 16)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:
        return inodes
    for fd in fds:
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    return inodes


def _split_endpoint(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


def established_connections(pid: int) -> set[tuple[tuple[str, int], tuple[str, int]]]:
    """(local, remote) of every ESTABLISHED TCP socket process `pid` holds.

    `ss` asks the kernel for established sockets only; /proc/net/tcp also lists every TIME_WAIT
    socket on the machine, which on a busy test box makes one read take a third of a second."""
    inodes = _socket_inodes(pid)
    found = set()
    if SS is not None:
        out = subprocess.run([SS, "-tnHe", "state", "established"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
        for line in out.splitlines():
            cols = line.split()
            ino = next((c[4:] for c in cols if c.startswith("ino:")), None)
            if len(cols) >= 4 and ino in inodes:
                found.add((_split_endpoint(cols[2]), _split_endpoint(cols[3])))
        return found
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) < 10 or cols[3] != "01" or cols[9] not in inodes:
                continue
            found.add((_decode_addr(cols[1]), _decode_addr(cols[2])))
    return found


@dataclass
class ConnectionTracker:
    """Samples a process's established TCP connections in a background thread."""

    pid: int
    interval: float = 0.1
    seen: dict[tuple, TrackedConnection] = field(default_factory=dict)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"conn-tracker-{self.pid}", daemon=True)

    def __enter__(self) -> "ConnectionTracker":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        now = time.monotonic()
        for local, remote in established_connections(self.pid):
            c = self.seen.get((local, remote))
            if c is None:
                self.seen[(local, remote)] = TrackedConnection(local, remote, now, now)
            else:
                c.last_seen = now

    def accepted_on(self, ports: set[int]) -> list[TrackedConnection]:
        """Connections the process accepted on one of `ports` (its local side is the port)."""
        return [c for c in self.seen.values() if c.local[1] in ports]

    def connected_to(self, port: int) -> list[TrackedConnection]:
        """Connections the process opened to `port`."""
        return [c for c in self.seen.values() if c.remote[1] == port]


def portcullis_ports(p: PortcullisProcess) -> set[int]:
    """The bootstrap listener and the broker port of the suite's single Kafka node."""
    return {p.listener_port, p.broker_port_base + 1}


def describe(conns: list[TrackedConnection]) -> str:
    """Each connection's client port, when it was first seen (seconds after the first of them) and
    how long it lived, in the order they began: a failure then shows which client phase a
    connection belonged to."""
    if not conns:
        return "none"
    t0 = min(c.first_seen for c in conns)
    return ", ".join(f"{c.remote[1]}->{c.local[1]} @{c.first_seen - t0:.1f}s {c.lifetime:.1f}s"
                     for c in sorted(conns, key=lambda c: c.first_seen))


# --------------------------------------------------------------------------------------------------
# Raw wire: SaslAuthenticate v1 and repeated PLAIN logins


@dataclass
class AuthResult:
    error: int
    message: str | None
    session_lifetime_ms: int


class ReauthConn(Conn):
    def sasl_authenticate_v1(self, auth_bytes: bytes) -> AuthResult:
        r = self.call(API_SASL_AUTHENTICATE, 1, byte_array(auth_bytes))
        error = r.int16()
        message = r.string()
        r.bytes_()  # auth bytes
        lifetime = r.int64()
        return AuthResult(error, message, lifetime)

    def login_plain(self, user: str, password: str) -> AuthResult:
        """SaslHandshake v1 (PLAIN) then SaslAuthenticate v1; raises unless both succeed."""
        error, mechanisms = self.sasl_handshake("PLAIN")
        if error != ERROR_NONE:
            raise AssertionError(f"SaslHandshake(PLAIN) error {error}, mechanisms {mechanisms}")
        result = self.sasl_authenticate_v1(plain_token(user, password))
        if result.error != ERROR_NONE:
            raise AssertionError(f"SaslAuthenticate(PLAIN) error {result.error}: {result.message}")
        return result

    def metadata_v1_raw(self, correlation_id: int) -> bytes:
        """A Metadata v1 request frame (all topics) with a chosen correlation id, for send_raw."""
        from kafka_wire import API_METADATA, request  # noqa: PLC0415

        return request(API_METADATA, 1, correlation_id, struct.pack(">i", -1))

    def fetch_v4_raw(self, correlation_id: int, topic: str, max_wait_ms: int) -> bytes:
        """A Fetch v4 request frame for partition 0 at offset 0 that the broker parks for up to
        `max_wait_ms` when the partition is empty (min_bytes 1)."""
        from kafka_wire import request, string  # noqa: PLC0415

        body = struct.pack(">iiiib", -1, max_wait_ms, 1, 1 << 20, 0)
        body += struct.pack(">i", 1) + string(topic)
        body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, 1 << 20)
        return request(API_FETCH, 4, correlation_id, body)

    def recv_correlation_id(self) -> int:
        """Reads one response frame and returns its correlation id."""
        return struct.unpack(">i", self.recv_frame()[:4])[0]
