#!/usr/bin/env python3
"""A slow peer, for tests: keeps connections to a daemon busy a byte at a time.

trickle-peer.py MODE HOST PORT [--bind ADDR] [--secs S] [--count N]
                [--every S] [--repeat] [CA CERT KEY]
Connects from ADDR (default: any) to HOST:PORT, TLS with a client
certificate if CA CERT KEY are given, and sends one byte (one TLS record
after the handshake) every --every seconds (0.3) for at most --secs (15):

  handshake  before TLS: the bytes of a ClientHello (plaintext: of a
             HELLO frame), one at a time, so the handshake never ends
  hello      after the TLS handshake: a HELLO frame, one byte at a time
  refused    --count connections (2) say HELLO for an unknown migration
             at once and then keep trickling bytes; once each has its
             ERROR, one more connection tries to get in (the probe)

Prints one line a connection: "closed S" when the daemon closed it S
seconds after it connected (refused: after its HELLO), "held S" when it
was still open when --secs ran out (--repeat: then connects again, until
killed); for refused also "error TEXT" with the
daemon's answer and "probe refused" or "probe accepted". A closed
connection is told by EOF, or by a write that fails once the daemon's
socket is gone (a half-closed one still reads what comes).
"""
import argparse
import select
import socket
import ssl
import struct
import threading
import time

UNKNOWN_ID = "0123456789abcdef0123456789abcdef"


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


def hello_frame(ident):
    ident = ident.encode()
    # Protocol version 2 (proto/frame.h), on the demand lane.
    return frame(1, b"\x08\x02" + b"\x18\x01" + b"\x22" +
                 varint(len(ident)) + ident)


def client_hello():
    """The first flight of a TLS client, as bytes, without a server."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="uffdd")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def connect(args):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if args.bind:
        sock.bind((args.bind, 0))
    sock.connect((args.host, args.port))
    return sock


def tls_wrap(args, sock):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(args.tls[0])
    ctx.load_cert_chain(args.tls[1], args.tls[2])
    return ctx.wrap_socket(sock, server_hostname=args.host)


def gone(sock, got):
    """Reads what has come: False while open; got collects the bytes."""
    sock.settimeout(0.01)
    try:
        data = sock.recv(4096)
    except (socket.timeout, ssl.SSLWantReadError):
        return False
    except (OSError, ssl.SSLError):
        return True
    if not data:
        return True
    got += data
    return False


def trickle(args, sock, data, t0, got, eof_ends=True):
    """Sends data a byte at a time; the seconds to the close, or None."""
    i = 0
    eof = False
    while time.monotonic() - t0 < args.secs:
        r, _, _ = select.select([sock], [], [], args.every)
        if r and not eof and gone(sock, got):
            if eof_ends:
                return time.monotonic() - t0
            eof = True  # half closed: writes tell when it is all gone
        try:
            sock.settimeout(1)
            sock.send(data[i % len(data):i % len(data) + 1])
        except (OSError, ssl.SSLError):
            return time.monotonic() - t0
        i += 1
        if r and eof:
            time.sleep(args.every)
    return None


def error_text(buf):
    """The message of an ERROR frame (field 2 of Error), or "none"."""
    if len(buf) < 12 or struct.unpack(">H", buf[:2])[0] != 6:
        return "none"
    msg, i = buf[12:12 + struct.unpack(">I", buf[4:8])[0]], 0
    while i < len(msg):
        tag, i = msg[i], i + 1
        if tag & 7 == 0:
            while msg[i] & 0x80:
                i += 1
            i += 1
        elif tag & 7 == 2:
            n, i = msg[i], i + 1  # messages here are short
            if tag >> 3 == 2:
                return msg[i:i + n].decode("utf-8", "replace")
            i += n
        else:
            break
    return "none"


def report(secs, held):
    if secs is None:
        print("held %.1f" % held, flush=True)
    else:
        print("closed %.1f" % secs, flush=True)


def one_slow(args):
    t0 = time.monotonic()
    sock = connect(args)
    if args.mode == "handshake" and args.tls:
        data = client_hello()
    elif args.mode == "handshake":  # plaintext: a frame of 1000 bytes
        data = struct.pack(">HHII", 1, 0, 1000, 0) + bytes(1000)
    else:
        if args.tls:
            sock = tls_wrap(args, sock)
        data = hello_frame(UNKNOWN_ID)
    report(trickle(args, sock, data, t0, bytearray()), args.secs)


def one_refused(args, ready, results, k):
    sock = connect(args)
    if args.tls:
        sock = tls_wrap(args, sock)
    got = bytearray()
    sock.sendall(hello_frame(UNKNOWN_ID))
    t0 = time.monotonic()
    # The ERROR: a header and its message.
    while len(got) < 12 or len(got) < 12 + struct.unpack(">I", got[4:8])[0]:
        if time.monotonic() - t0 > 5 or (
                select.select([sock], [], [], 0.1)[0] and gone(sock, got)):
            break
    results[k] = ["error " + error_text(bytes(got))]
    ready.release()
    # Valid bytes on (a record each): a daemon that still reads keeps it.
    secs = trickle(args, sock, b"\0", t0, got, eof_ends=False)
    results[k].append("held %.1f" % args.secs if secs is None
                      else "closed %.1f" % secs)


def probe(args):
    """Whether one more connection gets in now (TLS: its handshake)."""
    try:
        sock = connect(args)
        if args.tls:
            tls_wrap(args, sock).close()
            return "accepted"
        sock.sendall(hello_frame(UNKNOWN_ID))
        sock.settimeout(3)
        return "accepted" if sock.recv(4096) else "refused"
    except (OSError, ssl.SSLError):
        return "refused"


def refused(args):
    ready = threading.Semaphore(0)
    results = [None] * args.count
    threads = [threading.Thread(target=one_refused,
                                args=(args, ready, results, k))
               for k in range(args.count)]
    for t in threads:
        t.start()
    for _ in threads:
        ready.acquire()
    print("probe " + probe(args), flush=True)
    for t in threads:
        t.join()
    for r in results:
        for line in r:
            print(line, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["handshake", "hello", "refused"])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--bind")
    ap.add_argument("--secs", type=float, default=15)
    ap.add_argument("--every", type=float, default=0.3)
    ap.add_argument("--count", type=int, default=2)
    ap.add_argument("--repeat", action="store_true")
    ap.add_argument("tls", nargs="*")
    args = ap.parse_intermixed_args()
    if args.tls and len(args.tls) != 3:
        ap.error("want CA CERT KEY, or none")
    if args.mode == "refused":
        refused(args)
        return
    one_slow(args)
    while args.repeat:
        time.sleep(0.1)  # refused at once: no busy loop
        try:
            one_slow(args)
        except (OSError, ssl.SSLError) as e:
            print("failed %s" % e, flush=True)


if __name__ == "__main__":
    main()
