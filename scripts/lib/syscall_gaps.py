#!/usr/bin/env python3
"""How long a process in the data path holds the bytes it read before it writes them on.

Reads `perf trace` output (bench-datapath.sh --profile trace) and pairs each successful read of
a socket with the next write to a socket on the same thread, before that thread parks again
(epoll_wait, a futex wait): the time between the read's return and the write's start is the
process' own work on those bytes (parsing, deciding, queueing). Grouped by (read fd -> write fd), that is one
direction of one connection; the pairs are listed busiest first with the median size read and
the gap's percentiles in µs.

perf trace adds its own cost to every system call it records, about the same for every process,
so compare processes traced in the same run; the gaps are not figures of an untraced run.

Usage: syscall_gaps.py TRACE... (one report per file on stdout)
"""

import collections
import re
import sys

# A call perf trace printed whole: "  1238.917 ( 0.018 ms): comm/tid recvfrom(fd: 23, …) = 71".
WHOLE = re.compile(r"^\s*([\d.]+) \(\s*([\d.]+) ms\): (\S+)/(\d+) (\w+)\((.*)\)\s+= (-?\d+)")
# A call that another thread's output interrupted: its start ("… futex(…) ...") now, its end
# later ("… comm/tid  ... [continued]: futex()) = 0", with the start's time and the duration).
STARTED = re.compile(r"^\s*([\d.]+) \(\s*\): (\S+)/(\d+) (\w+)\((.*)\) \.\.\.\s*$")
CONTINUED = re.compile(
    r"^\s*([\d.]+) \(\s*([\d.]+) ms\): (\S+)/(\d+)\s+\.\.\. \[continued\]: (\w+)\(\)\)\s+= (-?\d+)")
# Socket calls only: tokio's eventfd wake-ups are plain read/write of 8 bytes.
READS = {"recvfrom", "recvmsg", "readv"}
WRITES = {"writev", "sendto", "sendmsg"}


def first_fd(args):
    m = re.match(r"fd(?:_in)?: (\d+)", args)
    return int(m.group(1)) if m else None


def is_wait(call, args):
    """The thread parks: an epoll wait, or a futex wait (a futex wake parks nobody)."""
    return call in ("epoll_wait", "epoll_pwait") or (call == "futex" and "WAIT" in args)


def report(path, out):
    pending = {}  # thread -> (end of its last read in ms, fd, bytes)
    started = {}  # thread -> (call, args) of its call whose end comes later
    gaps = collections.defaultdict(list)
    sizes = collections.defaultdict(list)
    lines = unread = 0

    def ended(tid, call, args, start, duration, ret):
        if call in READS and ret > 0:
            pending[tid] = (start + duration, first_fd(args), ret)
        elif call in WRITES and ret > 0 and tid in pending:
            end, fd_in, size = pending.pop(tid)
            key = (fd_in, first_fd(args))
            if None in key:
                return  # a split call whose start line was not understood: no fd to group by
            gaps[key].append(start - end)
            sizes[key].append(size)
        elif is_wait(call, args):
            pending.pop(tid, None)

    for line in open(path, errors="replace"):
        if not line.strip():
            continue
        lines += 1
        if m := WHOLE.match(line):
            start, duration, _comm, tid, call, args, ret = m.groups()
            ended(tid, call, args, float(start), float(duration), int(ret))
        elif m := STARTED.match(line):
            _start, _comm, tid, call, args = m.groups()
            started[tid] = (call, args)
            if is_wait(call, args):
                # Parked from here on: bytes read before are not handled in one go with a
                # write after it.
                pending.pop(tid, None)
        elif m := CONTINUED.match(line):
            start, duration, _comm, tid, call, ret = m.groups()
            call_started, args = started.pop(tid, (call, ""))
            if call_started == call and not is_wait(call, args):
                ended(tid, call, args, float(start), float(duration), int(ret))
        else:
            unread += 1
    print(f"== {path}", file=out)
    print(f"{lines} lines, {unread} not understood (left out)", file=out)
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
