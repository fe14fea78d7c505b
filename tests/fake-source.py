#!/usr/bin/env python3
"""A hostile source, for tests: answers HELLO with a bad region table.

fake-source.py PORTFILE CASE [CA CERT KEY]
Listens on 127.0.0.1 (a free port, written to PORTFILE), with TLS and a
required client certificate if CA CERT KEY are given. For each connection
it reads the destination's HELLO, then sends HELLO and the region table
named by CASE (overlap, dup-index, page-size, too-many, wrap; or one
region that matches a 16 MiB destination workload but for its name:
name-inject, lines for a state file and a terminal escape, name-bytes,
not UTF-8, name-long, 300 bytes), for CASE early-frame a HAVE frame
where the table belongs, or for error-bytes an ERROR whose text is not
UTF-8, and keeps the connection until the destination closes it. For
CASE name, a valid table of one region (16 MiB of private anonymous
memory at 0x500000000000) named $FAKE_REGION_NAME, on the first
connection only: the later ones (the bulk lane, reconnects) get HELLO
alone. Runs until killed.

CASE huge-zero sends a valid table (one hugetlb region of 2 MiB pages,
HUGE_PAGES of them at BASE: the destination workload's --kind hugetlb
--size 32M) and, once the destination has accepted it, a demand ZERO
frame for every page of it: eight times what one frame may cover, and
eight times the destination's zero source. A bulk lane gets HELLO only.

It speaks protocol version 2 (proto/frame.h), or $PEER_VERSION: an older
peer, for the test that one is refused clearly; on 127.0.0.1:$PEER_PORT
when set (the port of a source daemon it stands in for).
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


def recv_frame(conn):
    """The next frame from the destination: (type, message bytes)."""
    ftype, _, mlen, dlen = struct.unpack(">HHII", recv_exactly(conn, 12))
    return ftype, recv_exactly(conn, mlen + dlen)[:mlen]


def lane(hello):
    """The lane field (3) of a HELLO message: 1 demand, 2 bulk."""
    i = 0
    while i < len(hello):
        key, i = hello[i], i + 1
        if key & 7 == 0:
            v = 0
            shift = 0
            while True:
                b, i = hello[i], i + 1
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            if key >> 3 == 3:
                return v
        elif key & 7 == 2:
            n, i = hello[i], i + 1  # short fields only (the ID: 32)
            i += n
        else:
            return 0
    return 0


BASE = 0x500000000000
CASES = {
    "overlap": [region(0, BASE, 1 << 20), region(1, BASE + 4096, 1 << 20)],
    "dup-index": [region(0, BASE, 4096), region(0, BASE + 8192, 4096)],
    "page-size": [region(0, BASE, 1 << 20, 12345)],
    "too-many": [region(i, BASE + i * 8192, 4096) for i in range(5000)],
    "wrap": [region(0, 0xFFFFFFFFFFFFF000, 1 << 20)],
    # A name that would add lines to the destination's state file (a
    # process to restore into, a descriptor) and colour a terminal.
    "name-inject": [region(0, BASE, 16 << 20, name=b"x\npid=1\ntarget_fd=3"
                           b"\n\x1b[31mred\x1b]0;title\x07")],
    "name-bytes": [region(0, BASE, 16 << 20, name=b"/tmp/\xff\xfe\xc2\x9b")],
    "name-long": [region(0, BASE, 16 << 20, name=b"/" + b"a" * 299)],
    "name": [region(0, BASE, 16 << 20, name=os.environ.get(
        "FAKE_REGION_NAME", "").encode())],
}
HUGE_PAGE = 2 << 20
HUGE_PAGES = 16
HUGE_REGION = (field_varint(1, 0) + field_varint(3, BASE) +
               field_varint(4, HUGE_PAGES * HUGE_PAGE) +
               field_varint(5, HUGE_PAGE) + field_varint(6, 5) +
               field_varint(8, HUGE_PAGES))
CASES["huge-zero"] = [HUGE_REGION]
# PageData: region 0, page 0, npages, zero, demand.
HUGE_ZERO = frame(4, field_varint(1, 0) + field_varint(2, 0) +
                  field_varint(3, HUGE_PAGES) + field_varint(4, 1) +
                  field_varint(5, 1))

VERSION = int(os.environ.get("PEER_VERSION", "2"))
portfile, case = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(os.environ.get("PEER_PORT", "0"))))
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
        _, msg = recv_frame(conn)
        hello = frame(1, field_varint(1, VERSION) + field_varint(3, 1))
        if lane(msg) == 2:
            conn.sendall(frame(1, field_varint(1, VERSION) +
                               field_varint(3, 2)))
        elif case == "huge-zero":
            conn.sendall(hello + frame(2, table(CASES[case])))
            while recv_frame(conn)[0] != 2:  # the accepted regions
                pass
            conn.sendall(HUGE_ZERO)
        elif case == "early-frame":
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
