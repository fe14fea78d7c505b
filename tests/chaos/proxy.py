#!/usr/bin/env python3
"""A man in the middle for the chaos driver: relays TCP, breaks it once.

proxy.py LISTEN_ADDR LISTEN_PORT TARGET_ADDR TARGET_PORT
         --action flip|truncate|replay|none --at N [--dir down|up]

Relays each connection to TARGET. In the first connection whose stream in
direction DIR (down: what the target, the source daemon, sends; up: what
the client sends) passes N bytes, at byte N:
  flip      the byte is XORed with 0x5a;
  truncate  the stream ends there: both sockets are closed, mid-frame;
  replay    the 4 KiB before it (or the stream so far) are sent again.
Every other byte and every later connection passes unchanged. Prints
"listening PORT" once ready and "tampered ACTION CLIENT_PORT N" at the
change, flushed; runs until killed.
"""
import argparse
import socket
import sys
import threading

lock = threading.Lock()
armed = True


def take():
    """True for the one caller that gets to break its stream."""
    global armed
    with lock:
        go, armed = armed, False
    return go


def relay(src, dst, act, at, tag, both):
    seen = 0
    keep = b""  # the last bytes sent, for replay
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            if act and seen <= at < seen + len(data) and take():
                i = at - seen
                if act == "flip":
                    data = data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1:]
                    print("tampered flip %s %d" % (tag, at), flush=True)
                elif act == "truncate":
                    dst.sendall(data[:i])
                    print("tampered truncate %s %d" % (tag, at), flush=True)
                    raise OSError("truncated")
                elif act == "replay":
                    dst.sendall(data[:i])
                    again = (keep + data[:i])[-4096:]
                    dst.sendall(again)
                    print("tampered replay %s %d (%d bytes)" % (
                        tag, at, len(again)), flush=True)
                    data = data[i:]
                act = None
            seen += len(data)
            dst.sendall(data)
            keep = (keep + data)[-4096:]
    except OSError:
        pass
    for s in both:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client, target, a):
    try:
        up = socket.create_connection(target, timeout=10)
        up.settimeout(None)
    except OSError:
        client.close()
        return
    tag = client.getpeername()[1]
    act = None if a.action == "none" else a.action
    both = (client, up)
    down = threading.Thread(target=relay, args=(
        up, client, act if a.dir == "down" else None, a.at, tag, both),
        daemon=True)
    upl = threading.Thread(target=relay, args=(
        client, up, act if a.dir == "up" else None, a.at, tag, both),
        daemon=True)
    down.start()
    upl.start()
    down.join()
    upl.join()
    client.close()
    up.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("listen_addr")
    ap.add_argument("listen_port", type=int)
    ap.add_argument("target_addr")
    ap.add_argument("target_port", type=int)
    ap.add_argument("--action", default="none",
                    choices=("flip", "truncate", "replay", "none"))
    ap.add_argument("--at", type=int, default=0)
    ap.add_argument("--dir", default="down", choices=("down", "up"))
    a = ap.parse_args()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.listen_addr, a.listen_port))
    ls.listen(16)
    print("listening %d" % a.listen_port, flush=True)
    target = (a.target_addr, a.target_port)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, target, a),
                         daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
