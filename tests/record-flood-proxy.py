#!/usr/bin/env python3
"""A hostile source's place, for tests: relays TLS with keys of its own.

record-flood-proxy.py LISTEN_PORT TARGET_PORT CA CERT KEY --kind KIND
    --count K --at N [--times T]
Listens on 127.0.0.1:LISTEN_PORT for TLS 1.3 with CERT and KEY, which the
destination trusts: the place of a source that went bad, which a man in
the middle cannot take (tamper-proxy.py). Each connection is relayed to
the uffdd source at 127.0.0.1:TARGET_PORT over a TLS connection of its
own (CERT and KEY as the client, CA for the source's). What the source
sends, the proxy seals into records itself, with its own connection's
keys (SERVER_TRAFFIC_SECRET_0 from OpenSSL's key log; AES-GCM, as a
daemon's sealer), and so it can also send what OpenSSL never would: in
the first T connections (1) whose data from the source passes N bytes,
right after the record that passes them, K records that bring nothing.
KIND empty: application data of no bytes. KIND keyupdate: KeyUpdates
that ask nothing, each followed by the next key (RFC 8446 4.6.3, 7.2),
so that each is one the destination must take. Prints "listening PORT",
then "flooded PORT KIND K" (PORT: the client's) for each flood it sent
whole, or "flooded PORT KIND K: closed after S" if the destination
closed first, flushed, and runs until killed. Needs the Python module
cryptography (AES-GCM and HKDF).
"""
import argparse
import os
import select
import socket
import ssl
import struct
import sys
import tempfile
import threading

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

# The suites a daemon's opener takes: key length and hash.
SUITES = {
    "TLS_AES_128_GCM_SHA256": (16, hashes.SHA256),
    "TLS_AES_256_GCM_SHA384": (32, hashes.SHA384),
}
lock = threading.Lock()
floods_left = 0


def expand_label(md, secret, label, length):
    """HKDF-Expand-Label(secret, label, "", length), RFC 8446 7.1."""
    full = b"tls13 " + label
    info = struct.pack(">HB", length, len(full)) + full + b"\x00"
    return HKDFExpand(md(), length, info).derive(secret)


class Sealer:
    """TLS 1.3 records under a traffic secret, from record 0."""

    def __init__(self, suite, secret):
        self.keylen, self.md = SUITES[suite]
        self.use(secret)

    def use(self, secret):
        self.secret = secret
        self.aead = AESGCM(expand_label(self.md, secret, b"key", self.keylen))
        self.iv = expand_label(self.md, secret, b"iv", 12)
        self.seq = 0

    def seal(self, ctype, data):
        inner = data + bytes([ctype])
        hdr = struct.pack(">BHH", 23, 0x0303, len(inner) + 16)
        seq = b"\0" * 4 + struct.pack(">Q", self.seq)
        nonce = bytes(a ^ b for a, b in zip(self.iv, seq))
        self.seq += 1
        return hdr + self.aead.encrypt(nonce, inner, hdr)

    def key_update(self):
        """A KeyUpdate that asks nothing, under the old key; then the next."""
        rec = self.seal(22, b"\x18\x00\x00\x01\x00")
        self.use(expand_label(self.md, self.secret, b"traffic upd",
                              len(self.secret)))
        return rec


def server_secret(path):
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 3 and p[0] == "SERVER_TRAFFIC_SECRET_0":
                return bytes.fromhex(p[2])
    return None


def accept_tls(client, a):
    """The destination's handshake: its socket and our sealer, or None."""
    fd, path = tempfile.mkstemp(prefix="record-flood-keylog.")
    os.close(fd)
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(a.cert, a.key)
        ctx.load_verify_locations(a.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.num_tickets = 0  # as a daemon: nothing after the handshake
        ctx.keylog_filename = path
        down = ctx.wrap_socket(client, server_side=True)
        secret = server_secret(path)
    finally:
        os.unlink(path)
    suite = down.cipher()[0]
    if secret is None or suite not in SUITES:
        print("refused %s: suite %s" % (client.getpeername()[1], suite),
              flush=True)
        down.close()
        return None, None
    return down, Sealer(suite, secret)


def connect_tls(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(a.cert, a.key)
    ctx.load_verify_locations(a.ca)
    raw = socket.create_connection(("127.0.0.1", a.target))
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def flood(raw, sealer, a, tag):
    """K records that bring nothing, in batches; False once refused."""
    sent = 0
    while sent < a.count:
        n = min(256, a.count - sent)
        if a.kind == "empty":
            recs = [sealer.seal(23, b"") for _ in range(n)]
        else:
            recs = [sealer.key_update() for _ in range(n)]
        try:
            raw.sendall(b"".join(recs))
        except OSError:
            print("flooded %s %s %d: closed after %d" %
                  (tag, a.kind, a.count, sent), flush=True)
            return False
        sent += n
    print("flooded %s %s %d" % (tag, a.kind, a.count), flush=True)
    return True


def relay(down, sealer, up, a, tag):
    """
    One thread a connection, so that no SSL object is used by two at once:
    what the destination sends goes to the source through OpenSSL; what
    the source sends goes to the destination in records of ours, written
    on the socket beside OpenSSL (which sends nothing after the handshake).
    """
    global floods_left
    raw = socket.socket(fileno=os.dup(down.fileno()))
    seen, at = 0, a.at
    try:
        while True:
            ready = [s for s in (down, up) if s.pending()]
            if not ready:
                ready, _, _ = select.select([down, up], [], [])
            for s in ready:
                data = s.recv(1 << 16 if s is down else 16384)
                if not data:
                    if s is up:  # the source's close_notify, passed on
                        raw.sendall(sealer.seal(21, b"\x01\x00"))
                    return
                if s is down:
                    up.sendall(data)
                    continue
                raw.sendall(sealer.seal(23, data))
                seen += len(data)
                if at is not None and seen > at:
                    with lock:
                        go = floods_left > 0
                        floods_left -= go
                    at = None
                    if go and not flood(raw, sealer, a, tag):
                        return
    except (OSError, ssl.SSLError):
        pass
    finally:
        for s in (raw, down, up):
            try:
                s.close()
            except OSError:
                pass


def serve(client, a):
    tag = client.getpeername()[1]
    try:
        down, sealer = accept_tls(client, a)
        if down is None:
            return
        up = connect_tls(a)
    except (OSError, ssl.SSLError) as e:
        print("connection %s: %s" % (tag, e), flush=True)
        client.close()
        return
    relay(down, sealer, up, a, tag)


def main():
    global floods_left
    ap = argparse.ArgumentParser()
    ap.add_argument("listen", type=int)
    ap.add_argument("target", type=int)
    ap.add_argument("ca")
    ap.add_argument("cert")
    ap.add_argument("key")
    ap.add_argument("--kind", choices=("empty", "keyupdate"), required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--at", type=int, required=True)
    ap.add_argument("--times", type=int, default=1)
    a = ap.parse_args()
    floods_left = a.times
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.listen))
    ls.listen(16)
    print("listening %d" % a.listen, flush=True)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, a), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
