"""The independent checker: what a migration's processes say, read from
outside the daemons.

Hashes never change what a daemon reads: a source that is still to be
served is hashed from its present pages only (tests/memhash --present:
pagemap first, which touches nothing; the destination then with --map, the
same pages), and a kept source is hashed by tests/memhash after its
migration ended. The destination is hashed once it is complete (or
failed, running), when nothing will be served to it any more.
"""
import calendar
import os
import re
import subprocess
import time

from daemon import proc_state

VERIFIED = re.compile(r"^verified (\d+) pages, (\d+) mismatches, (\d+) lost",
                      re.M)
CHILD_VERIFIED = re.compile(r"^child verified (\d+) pages, (\d+) mismatches",
                            re.M)
# Events after which the target's memory differs from the source's by
# design (pages gone, moved or zeroed): no hash, the workload's own check.
NO_HASH_EVENTS = ("unmap", "remap", "remove", "punch")


def memhash(tool, pid, start, end, poke=0, mode=()):
    """tests/memhash of PID's START-END, or None when it cannot be read.
    MODE: ("--present", MAP) for a source still to be served (only its
    present pages read, MAP written), ("--map", MAP) for its destination
    (the same pages)."""
    cmd = [tool] + list(mode) + [str(pid), hex(start), hex(end)]
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
        # A zombie its tracer (a daemon holding it) has not collected
        # is not reaped by its parent yet: gone all the same.
        return "zombie" if proc_state(proc.pid) in ("Z", "X") else None
    return "signal %d" % -rc if rc < 0 else "exit %d" % rc


def stamp(t):
    """Wall-clock time T as the daemons stamp their lines (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + \
        ".%06dZ" % int((t % 1) * 1e6)


STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{6})Z uffdd: "
                     r"(.*)$", re.M)


def commit_sent(log_path, mig_id):
    """The wall-clock time of the last "COMMIT N sent" a source daemon's
    log (stamped: UFFDD_LOG_TIMESTAMPS) has for migration MIG_ID, or
    None."""
    last = None
    for m in STAMPED.finditer(read(log_path)):
        line = m.group(3)
        if not line.startswith("migration " + mig_id[:8]) or \
                not re.search(r": COMMIT \d+ sent", line):
            continue
        last = calendar.timegm(time.strptime(m.group(1),
                                             "%Y-%m-%dT%H:%M:%S")) + \
            int(m.group(2)) / 1e6
    return last
