"""Free loopback TCP ports for the servers the scripts and tests start (Kafka, Portcullis, Jaeger).

Ports are taken from just below the kernel's ephemeral range (net.ipv4.ip_local_port_range), not
with bind(port 0). A port that bind(0) reports free lies inside the ephemeral range: between that
check and the server's own bind, any outgoing connection of any process (a Kafka client, the broker
itself) may take it as its local port, and a later bind(0) may report the same port again. Below
the range, only an explicit bind takes a port. Within one process no port is handed out twice.

Processes that run side by side (the suite's parallel pytest workers, each with its own Kafkas and
Portcullis nodes) take disjoint parts of that pool: FREE_PORT_SLICE="k/n" (inherited by every child,
e.g. a test's own Kafka started through scripts/lib/kafka.sh) limits this process to the k-th of n
equal parts, so a port one worker picked but has not bound yet is never another's pick.

Usage as a script: `python3 free_ports.py N` prints N distinct ports, one per line.
"""

from __future__ import annotations

import os
import random
import socket
import sys

# How many ports below the ephemeral range to draw from.
POOL_SIZE = 12_000

_handed_out: set[int] = set()
_random = random.Random()


def _pool() -> range | None:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    start = max(1024, low - POOL_SIZE)
    if low - start < 1000:
        return None
    index, parts = slice_of(os.environ.get("FREE_PORT_SLICE", ""))
    size = (low - start) // parts
    return range(start + index * size, start + (index + 1) * size)


def slice_of(spec: str) -> tuple[int, int]:
    """(k, n) of a FREE_PORT_SLICE "k/n"; (0, 1), the whole pool, when unset."""
    if not spec:
        return 0, 1
    k, _, n = spec.partition("/")
    index, parts = int(k), int(n)
    if not 0 <= index < parts:
        raise ValueError(f"FREE_PORT_SLICE={spec!r}: want k/n with 0 <= k < n")
    return index, parts


def _bind(port: int) -> socket.socket | None:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    return s


def free_ports(n: int) -> list[int]:
    """`n` distinct ports, free now and not handed out before by this process."""
    pool = _pool()
    socks: list[socket.socket] = []
    try:
        for _attempt in range(100 * n + 100):
            if len(socks) == n:
                break
            port = _random.choice(pool) if pool is not None else 0
            if port in _handed_out:
                continue
            s = _bind(port)
            if s is None:
                continue
            port = s.getsockname()[1]
            if port in _handed_out:
                s.close()
                continue
            _handed_out.add(port)
            socks.append(s)
        if len(socks) < n:
            raise RuntimeError(f"found only {len(socks)} of {n} free ports")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


if __name__ == "__main__":
    for p in free_ports(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
        print(p)
