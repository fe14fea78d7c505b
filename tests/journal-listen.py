#!/usr/bin/env python3
"""A stand-in for journald's native socket, for tests.

Binds an AF_UNIX datagram socket at argv[1] and decodes every entry it
receives by the journal's native protocol (KEY=value lines, or KEY, a
64-bit little-endian length, the value and a newline). Appends each entry
to argv[2] as one JSON object a line. An entry that breaks the protocol is
written as {"BROKEN": "why"}. Prints "listening" once bound. Runs until
killed.
"""
import json
import os
import socket
import struct
import sys


def decode(b):
    fields, i = {}, 0
    while i < len(b):
        nl = b.find(b"\n", i)
        if nl < 0:
            return {"BROKEN": "entry does not end with a newline"}
        line = b[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:
            k = line
            if nl + 9 > len(b):
                return {"BROKEN": "binary field %r cut short" % k}
            (n,) = struct.unpack("<Q", b[nl + 1:nl + 9])
            start = nl + 9
            if start + n + 1 > len(b) or b[start + n:start + n + 1] != b"\n":
                return {"BROKEN": "binary field %r: bad length" % k}
            v = b[start:start + n]
            i = start + n + 1
        key = k.decode("ascii", "replace")
        if not key or not all(c.isupper() or c.isdigit() or c == "_" for c in key):
            return {"BROKEN": "bad key %r" % key}
        fields[key] = v.decode("utf-8", "replace")
    return fields


path, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
print("listening", flush=True)
with open(out, "a", encoding="utf-8") as f:
    while True:
        f.write(json.dumps(decode(s.recv(65536))) + "\n")
        f.flush()
        os.fsync(f.fileno())
