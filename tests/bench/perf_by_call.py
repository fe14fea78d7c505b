#!/usr/bin/env python3
"""Where a daemon's CPU goes, by the call that contains each sample.

    perf record -a -g -F HZ -o DATA -- sleep SECS   (during the migrations)
    perf script -i DATA -F pid,ip,sym,dso | \\
        tests/bench/perf_by_call.py HZ GIB PID [PID...]

prints, for each PID, its CPU seconds per GiB moved (samples / HZ / GIB)
split into the steps docs/benchmarks.md names: the cipher (libcrypto's
assembly, which has no symbols), TCP send and receive, the reads of the
target (process_vm_readv, pread), UFFDIO_COPY, user-space copies, and the
rest by library. A sample counts for the first step found from its leaf
up, so a copy inside a system call counts for that call.
"""
import collections
import re
import sys

# A kernel function in the call chain, and the step it stands for.
KERNEL_STEPS = [
    ("process_vm_rw", "process_vm_readv"),
    ("tcp_sendmsg", "TCP send"),
    ("tcp_recvmsg", "TCP receive"),
    ("userfaultfd_ioctl", "UFFDIO_COPY and other uffd ioctls"),
    ("mfill_atomic", "UFFDIO_COPY and other uffd ioctls"),
    ("do_epoll_wait", "epoll_wait"),
    ("pagemap_scan", "PAGEMAP_SCAN"),
    ("change_pte_range", "write protection (wptrack)"),
    ("__x64_sys_pread", "pread"),
    ("net_rx_action", "softirq receive"),
    ("__x64_sys_", "other system calls"),
]


def step(frames):
    leaf_sym, leaf_dso = frames[0]
    if "libcrypto" in leaf_dso and (leaf_sym.startswith("0x") or
                                    "aes" in leaf_sym.lower() or
                                    "gcm" in leaf_sym.lower()):
        return "cipher (libcrypto assembly)"
    chain = " ".join(sym for sym, _ in frames)
    for key, name in KERNEL_STEPS:
        if key in chain:
            return name
    if "memmove" in leaf_sym or "memcpy" in leaf_sym:
        return "user-space copies"
    return leaf_dso.split("/")[-1] + ", other"


def samples(stream):
    """(pid, [(sym, dso), ...] leaf first) for each sample."""
    pid, frames = None, []
    for line in stream:
        line = line.rstrip("\n")
        if not line.strip():
            if pid is not None and frames:
                yield pid, frames
            pid, frames = None, []
            continue
        head = re.match(r"\s*(\d+)\s*$", line)
        if head:
            if pid is not None and frames:
                yield pid, frames
            pid, frames = head.group(1), []
            continue
        m = re.match(r"\s*([0-9a-f]+)\s+(.*)\s+\((.*)\)$", line)
        if m:
            sym = m.group(2).split("+")[0]
            if sym == "[unknown]":
                sym = "0x" + m.group(1)
            frames.append((sym, m.group(3)))
    if pid is not None and frames:
        yield pid, frames


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    hz, gib, pids = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    steps = collections.defaultdict(collections.Counter)
    for pid, frames in samples(sys.stdin):
        if pid in pids:
            steps[pid][step(frames)] += 1
    for pid in pids:
        total = sum(steps[pid].values())
        print("pid %s: %.3f CPU-s/GiB" % (pid, total / hz / gib))
        for name, n in steps[pid].most_common(12):
            print("  %-36s %.3f" % (name, n / hz / gib))


if __name__ == "__main__":
    main()
