"""Free loopback TCP ports for the servers the scripts and tests start (Kafka, Portcullis, Jaeger).

Ports are taken from just below the kernel's ephemeral range (net.ipv4.ip_local_port_range), not
with bind(port 0). A port that bind(0) reports free lies inside the ephemeral range: between that
check and the server's own bind, any outgoing connection of any process (a Kafka client, the broker
itself) may take it as its local port, and a later bind(0) may report the same port again. Below
the range, only an explicit bind takes a port. Within one process no port is handed out twice.

Usage as a script: `python3 free_ports.py N` prints N distinct ports, one per line.
"""

from __future__ import annotations

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
    return range(start, low) if low - start >= 1000 else None


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
