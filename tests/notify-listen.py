#!/usr/bin/env python3
"""A stand-in for systemd's notification socket, for tests.

Binds an AF_UNIX datagram socket at argv[1] and appends every message it
receives to argv[2], one message a record, records separated by a line
"--". Prints "listening" once bound. Runs until killed.
"""
import os
import socket
import sys

path, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
print("listening", flush=True)
with open(out, "a", encoding="utf-8") as f:
    while True:
        msg = s.recv(4096)
        f.write(msg.decode("utf-8", "replace") + "\n--\n")
        f.flush()
        os.fsync(f.fileno())
