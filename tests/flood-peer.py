#!/usr/bin/env python3
"""A hostile destination, for tests: floods a source with page requests.

flood-peer.py HOST PORT ID COUNT [CA CERT KEY]
Connects (TLS with a client certificate if CA CERT KEY are given), says
HELLO for migration ID on the demand lane, accepts region 0, then sends
COUNT requests for page 0 and never reads an answer. Prints "sent" when
all are written (or the source stops reading), then waits for stdin to
close before it disconnects. It speaks protocol version 2 (proto/frame.h),
or $PEER_VERSION: an older peer, for the test that one is refused clearly
(it prints the source's ERROR then, and exits).
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


def frame(ftype, msg):
    return struct.pack(">HHII", ftype, 0, len(msg), 0) + msg


host, port, mig_id, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sock = socket.create_connection((host, port))
if len(sys.argv) > 5:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(sys.argv[5])
    ctx.load_cert_chain(sys.argv[6], sys.argv[7])
    sock = ctx.wrap_socket(sock, server_hostname=host)
ident = mig_id.encode()
VERSION = int(os.environ.get("PEER_VERSION", "2"))
hello = b"\x08" + varint(VERSION) + b"\x18\x01" + b"\x22" + varint(len(ident)) + ident
regions = b"\x0a\x00"  # one Region, index 0
request = frame(3, b"\x18\x01")  # region 0, page 0, npages 1
sock.sendall(frame(1, hello) + frame(2, regions))
sock.settimeout(20)
if VERSION != 2:
    # An older peer: the source's answer is printed as it came.
    data = b""
    while True:
        try:
            got = sock.recv(4096)
        except (socket.timeout, ssl.SSLError, OSError):
            break
        if not got:
            break
        data += got
    print("answer", data[12:].decode("utf-8", "replace"), flush=True)
    sys.exit(0)
batch = request * 1000
try:
    for _ in range(count // 1000):
        sock.sendall(batch)
except (socket.timeout, ssl.SSLError, OSError):
    pass  # the source stopped reading: that is the point
print("sent", flush=True)
sys.stdin.read()
sock.close()
