#!/usr/bin/env python3
"""How long a process in the data path holds the bytes it read before it writes them on.

Reads `perf trace` output (bench-datapath.sh --profile trace) and pairs each successful read of
a socket with the next write on the same thread, before that thread waits again (epoll_wait,
futex): the time between the read's return and the write's start is the process' own work on
those bytes (parsing, deciding, queueing). Grouped by (read fd -> write fd), that is one
direction of one connection; the pairs are listed busiest first with the median size read and
the gap's percentiles in µs.

perf trace adds its own cost to every system call it records, about the same for every process,
so compare processes traced in the same run; the gaps are not figures of an untraced run.

Usage: syscall_gaps.py TRACE... (one report per file on stdout)
"""

import collections
import re
import sys

LINE = re.compile(r"^\s*([\d.]+) \(\s*([\d.]*)\s*ms\): (\S+)/(\d+) (\w+)\((.*?)\)\s+= (-?\d+)")
READS = {"recvfrom", "read", "recvmsg", "readv"}
WRITES = {"writev", "write", "sendto", "sendmsg"}
WAITS = {"epoll_wait", "epoll_pwait", "futex"}


def first_fd(args):
    m = re.match(r"fd(?:_in)?: (\d+)", args)
    return int(m.group(1)) if m else None


def report(path, out):
    pending = {}  # thread -> (end of its last read in ms, fd, bytes)
    gaps = collections.defaultdict(list)
    sizes = collections.defaultdict(list)
    for line in open(path, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue  # headers, calls split across lines, failed parses
        start, duration, _comm, tid, call, args, ret = m.groups()
        start, ret = float(start), int(ret)
        if call in READS and ret > 0:
            pending[tid] = (start + (float(duration) if duration else 0.0), first_fd(args), ret)
        elif call in WRITES and ret > 0 and tid in pending:
            end, fd_in, size = pending.pop(tid)
            key = (fd_in, first_fd(args))
            gaps[key].append(start - end)
            sizes[key].append(size)
        elif call in WAITS:
            pending.pop(tid, None)
    print(f"== {path}", file=out)
    print("read fd -> write fd | pairs | bytes read (median) | gap µs p10 / p50 / p90 / p99", file=out)
    for key, values in sorted(gaps.items(), key=lambda kv: -len(kv[1]))[:12]:
        values.sort()
        read = sorted(sizes[key])[len(values) // 2]

        def pct(p):
            return values[int(p * (len(values) - 1))] * 1000

        print(f"{key[0]} -> {key[1]} | {len(values)} | {read} | "
              f"{pct(.1):.1f} / {pct(.5):.1f} / {pct(.9):.1f} / {pct(.99):.1f}", file=out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for trace in sys.argv[1:]:
        report(trace, sys.stdout)
