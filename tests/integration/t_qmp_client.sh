#!/usr/bin/env bash
# uffd-client's QMP client against a scripted QMP server (no QEMU needed):
# greeting and capabilities negotiation, a return that arrives in pieces
# after an event, answers tagged with another command's id passed over, a
# QMP error reported with its description, arguments passed as JSON, and a
# server that hangs up.
. "$SRC/tests/lib.sh"
command -v python3 >/dev/null || skip "python3 missing"
S=$T/qmp.sock
python3 - "$S" >"$T/server.log" 2>&1 <<'PY' &
import json, os, socket, sys, time
path = sys.argv[1]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(1)
def send(c, o, pieces=1):
    b = (json.dumps(o) + "\r\n").encode()
    step = max(1, len(b) // pieces)
    for i in range(0, len(b), step):
        c.sendall(b[i:i + step])
        time.sleep(0.01)
while True:
    c, _ = srv.accept()
    f = c.makefile("rb")
    send(c, {"QMP": {"version": {}, "capabilities": []}})
    caps = False
    for line in f:
        m = json.loads(line)
        cmd = m["execute"]
        if cmd == "qmp_capabilities":
            caps = True
            send(c, {"return": {}})
        elif not caps:
            send(c, {"error": {"class": "CommandNotFound", "desc": "caps first"}})
        elif cmd == "query-status":
            send(c, {"event": "STOP", "data": {}, "timestamp": {"seconds": 1, "microseconds": 2}})
            send(c, {"return": {"status": "paused", "running": False}}, pieces=5)
        elif cmd == "echo":
            send(c, {"return": m.get("arguments", {})})
        elif cmd == "late":
            # The late answer to an earlier command, then this one's.
            send(c, {"return": {"which": "earlier"}, "id": "uffd-client-0"})
            send(c, {"error": {"class": "GenericError", "desc": "earlier"}, "id": "x"})
            send(c, {"return": {"which": "this"}, "id": m.get("id")})
        elif cmd == "hangup":
            break
        else:
            send(c, {"error": {"class": "CommandNotFound", "desc": "The command %s has not been found" % cmd}})
    f.close()
    c.close()
PY
PIDS+=($!)
for _ in $(seq 100); do
	[ -S "$S" ] && break
	sleep 0.05
done
[ -S "$S" ] || fail "fake QMP server did not start: $(cat "$T/server.log")"

out=$("$CLIENT" qmp "$S" query-status) || fail "query-status failed"
[ "$out" = '{"status":"paused","running":false}' ] || fail "query-status returned $out"
out=$("$CLIENT" qmp "$S" echo '{"uri":"tcp:127.0.0.1:1","n":[1,2]}') || fail "echo failed"
[ "$out" = '{"uri":"tcp:127.0.0.1:1","n":[1,2]}' ] || fail "arguments came back as $out"
out=$("$CLIENT" qmp "$S" late) || fail "late failed"
[ "$out" = '{"which":"this"}' ] || fail "an earlier command's answer taken: $out"
if "$CLIENT" qmp "$S" no-such-command >"$T/err" 2>&1; then
	fail "a QMP error exited 0"
fi
grep -q 'no-such-command: The command no-such-command has not been found' "$T/err" ||
	fail "QMP error not reported: $(cat "$T/err")"
"$CLIENT" qmp "$S" echo '{not json' >"$T/err" 2>&1 && fail "bad JSON arguments accepted"
grep -q 'not JSON' "$T/err" || fail "bad JSON arguments: $(cat "$T/err")"
if "$CLIENT" qmp "$S" hangup >"$T/err" 2>&1; then
	fail "a server that hung up gave success"
fi
grep -q 'QEMU closed QMP' "$T/err" || fail "hang-up not reported: $(cat "$T/err")"
if "$CLIENT" qmp "$T/none.sock" query-status >"$T/err" 2>&1; then
	fail "no QMP socket gave success"
fi
grep -q 'is QEMU running with -qmp' "$T/err" || fail "missing socket: $(cat "$T/err")"
info "QMP client: returns, events in between, other ids, errors, arguments, hang-ups"
