"""The independent checker: what a migration's processes say, read from
outside the daemons.

Hashes never change what a daemon reads: a source that is still to be
served is hashed from its present pages only (pagemap first, which touches
nothing; a page neither present nor swapped reads as zeros, as it will on
the destination), and a kept source is hashed by tests/memhash after its
migration ended. The destination is hashed once it is complete (or
failed, running), when nothing will be served to it any more.
"""
import hashlib
import os
import re
import struct
import subprocess
import time

from daemon import proc_state

PS = 4096
PM_PRESENT = 1 << 63
PM_SWAP = 1 << 62
# A uffd-wp PTE marker (left by a write-tracking source on a page never
# touched) is a swap entry of the last type to pagemap: not swapped.
PM_SWP_TYPE = 0x1F
VERIFIED = re.compile(r"^verified (\d+) pages, (\d+) mismatches, (\d+) lost",
                      re.M)
CHILD_VERIFIED = re.compile(r"^child verified (\d+) pages, (\d+) mismatches",
                            re.M)
# Events after which the target's memory differs from the source's by
# design (pages gone, moved or zeroed): no hash, the workload's own check.
NO_HASH_EVENTS = ("unmap", "remap", "remove", "punch")


class HashError(Exception):
    pass


def _poke(buf, at, start, poke):
    """The workload's pre-arrival writes (word 8 of every POKE-th page),
    as tests/memhash --poke-every applies them."""
    if not poke:
        return buf
    b = bytearray(buf)
    for off in range(0, len(b), PS):
        page = (at + off - start) // PS
        if page % poke == 0 and off + 72 <= len(b):
            b[off + 64:off + 72] = struct.pack("<Q", 0xFFFF << 48 | page)
    return bytes(b)


def present_hash(pid, start, end, poke=0):
    """SHA-256 of PID's START-END as memhash computes it, reading only the
    pages pagemap says are present: the others are zeros (none may be
    swapped: the run has no swap). Fails if the read faulted in a page."""
    npages = (end - start) // PS
    with open("/proc/%d/pagemap" % pid, "rb") as f:
        f.seek(start // PS * 8)
        pm = struct.unpack("<%dQ" % npages, f.read(npages * 8))
    if any(e & PM_SWAP and e & PM_SWP_TYPE != PM_SWP_TYPE for e in pm):
        raise HashError("a page of the source is swapped")
    h = hashlib.sha256()
    zero = bytes(PS)
    with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
        for i, e in enumerate(pm):
            at = start + i * PS
            if e & PM_PRESENT:
                mem.seek(at)
                buf = mem.read(PS)
                if len(buf) != PS:
                    raise HashError("short read at 0x%x" % at)
            else:
                buf = zero
            h.update(_poke(buf, at, start, poke))
    with open("/proc/%d/pagemap" % pid, "rb") as f:
        f.seek(start // PS * 8)
        after = struct.unpack("<%dQ" % npages, f.read(npages * 8))
    for a, b in zip(pm, after):
        if not a & PM_PRESENT and b & PM_PRESENT:
            raise HashError("hashing made a page present")
    return h.hexdigest()


def memhash(tool, pid, start, end, poke=0):
    """tests/memhash of PID's START-END, or None when it cannot be read."""
    cmd = [tool, str(pid), hex(start), hex(end)]
    if poke:
        cmd += ["--poke-every", str(poke)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    return r.stdout.strip() if r.returncode == 0 else None


def read(path):
    try:
        return open(path, errors="replace").read()
    except OSError:
        return ""


def verdict(out_path, proc, seconds):
    """The destination workload's verdict (pages, mismatches, lost), waited
    for up to SECONDS while it runs; None if it has none."""
    deadline = time.time() + seconds
    while True:
        m = VERIFIED.search(read(out_path))
        if m:
            return tuple(int(x) for x in m.groups())
        if proc.poll() is not None or time.time() > deadline:
            return None
        if proc_state(proc.pid) in ("T", "t"):
            return None
        time.sleep(0.1)


def child_verdict(out_path, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        m = CHILD_VERIFIED.search(read(out_path))
        if m:
            return int(m.group(2))
        time.sleep(0.1)
    return None


def holds_uffd(pid):
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                if "userfaultfd" in os.readlink("/proc/%d/fd/%s" % (pid, fd)):
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return False


def death(proc):
    """How a workload ended: None while it runs."""
    rc = proc.poll()
    if rc is None:
        return None
    return "signal %d" % -rc if rc < 0 else "exit %d" % rc
