#!/usr/bin/env python3
"""A man in the middle, for tests: relays TCP and changes one byte.

tamper-proxy.py LISTEN_PORT TARGET_PORT --flip-at N [--times K]
Listens on 127.0.0.1:LISTEN_PORT and relays each connection to
127.0.0.1:TARGET_PORT. In the first K connections (1) whose answers from
the target pass N bytes, the byte at offset N of what the target sends is
XORed with 0x5a on its way to the client; every other byte, and every
later connection, passes unchanged. Prints "flipped PORT N" (the client's
port) for each change, flushed, and runs until killed.
"""
import argparse
import socket
import sys
import threading

lock = threading.Lock()
flips_left = 0


def relay(src, dst, flip_at, tag):
    """Copies src to dst; flips byte flip_at once (if not None)."""
    global flips_left
    seen = 0
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            if flip_at is not None and seen <= flip_at < seen + len(data):
                with lock:
                    go = flips_left > 0
                    flips_left -= go
                if go:
                    i = flip_at - seen
                    data = data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1:]
                    print("flipped %s %d" % (tag, flip_at), flush=True)
                flip_at = None
            seen += len(data)
            dst.sendall(data)
    except OSError:
        pass
    for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass


def serve(client, target, flip_at):
    try:
        up = socket.create_connection(("127.0.0.1", target))
    except OSError:
        client.close()
        return
    tag = client.getpeername()[1]
    a = threading.Thread(target=relay, args=(client, up, None, tag),
                         daemon=True)
    b = threading.Thread(target=relay, args=(up, client, flip_at, tag),
                         daemon=True)
    a.start()
    b.start()
    a.join()
    b.join()
    client.close()
    up.close()


def main():
    global flips_left
    ap = argparse.ArgumentParser()
    ap.add_argument("listen", type=int)
    ap.add_argument("target", type=int)
    ap.add_argument("--flip-at", type=int, required=True)
    ap.add_argument("--times", type=int, default=1)
    a = ap.parse_args()
    flips_left = a.times
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.listen))
    ls.listen(16)
    # LISTEN 0: the kernel picks a free port; say which.
    print("listening %d" % ls.getsockname()[1], flush=True)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, a.target, a.flip_at),
                         daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
