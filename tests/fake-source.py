#!/usr/bin/env python3
"""A hostile source, for tests: answers HELLO with a bad region table.

fake-source.py PORTFILE CASE [CA CERT KEY]
Listens on 127.0.0.1 (a free port, written to PORTFILE), with TLS and a
required client certificate if CA CERT KEY are given. For each connection
it reads the destination's HELLO, then sends HELLO and the region table
named by CASE (overlap, dup-index, page-size, too-many, wrap), for CASE
early-frame a HAVE frame where the table belongs, or for error-bytes an
ERROR whose text is not UTF-8, and keeps the connection
until the destination closes it. For CASE name, a valid table of one
region (16 MiB of private anonymous memory at 0x500000000000) named
$FAKE_REGION_NAME, on the first connection only: the later ones (the bulk
lane, reconnects) get HELLO alone. Runs until killed.
"""
import os
import socket
import ssl
import struct
import sys


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, b):
    return varint(num << 3 | 2) + varint(len(b)) + b


def region(index, start, length, page_size=4096, name=b""):
    return (field_varint(1, index) +
            (field_bytes(2, name) if name else b"") + field_varint(3, start) +
            field_varint(4, length) + field_varint(5, page_size) +
            field_varint(6, 1) + field_varint(7, length // page_size))


def table(regions):
    return b"".join(field_bytes(1, r) for r in regions)


def recv_exactly(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise OSError("closed")
        buf += chunk
    return buf


def frame(ftype, msg):
    return struct.pack(">HHII", ftype, 0, len(msg), 0) + msg


BASE = 0x500000000000
CASES = {
    "overlap": [region(0, BASE, 1 << 20), region(1, BASE + 4096, 1 << 20)],
    "dup-index": [region(0, BASE, 4096), region(0, BASE + 8192, 4096)],
    "page-size": [region(0, BASE, 1 << 20, 12345)],
    "too-many": [region(i, BASE + i * 8192, 4096) for i in range(5000)],
    "wrap": [region(0, 0xFFFFFFFFFFFFF000, 1 << 20)],
    "name": [region(0, BASE, 16 << 20, name=os.environ.get(
        "FAKE_REGION_NAME", "").encode())],
}

portfile, case = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(8)
ctx = None
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(sys.argv[3])
    ctx.load_cert_chain(sys.argv[4], sys.argv[5])
    ctx.verify_mode = ssl.CERT_REQUIRED
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
os.rename(portfile + ".tmp", portfile)
first = True
while True:
    conn, _ = srv.accept()
    try:
        if ctx:
            conn = ctx.wrap_socket(conn, server_side=True)
        hdr = recv_exactly(conn, 12)
        _, _, mlen, dlen = struct.unpack(">HHII", hdr)
        recv_exactly(conn, mlen + dlen)
        hello = frame(1, field_varint(1, 1) + field_varint(3, 1))
        if case == "early-frame":
            conn.sendall(hello + frame(7, b""))
        elif case == "error-bytes":
            # An ERROR whose text is not UTF-8 (protobuf-c does not check).
            conn.sendall(hello + frame(6, field_varint(1, 5) + field_bytes(
                2, b"no migration \xff\xfe\x80 here \x1b[31m")))
        elif case == "name" and not first:
            conn.sendall(hello)
        else:
            conn.sendall(hello + frame(2, table(CASES[case])))
        first = False
        while conn.recv(4096):
            pass
    except (OSError, ssl.SSLError):
        pass
    conn.close()
