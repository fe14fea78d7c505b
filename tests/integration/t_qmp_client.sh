#!/usr/bin/env bash
# uffd-client's QMP client against a scripted QMP server (no QEMU needed):
# greeting and capabilities negotiation, a return that arrives in pieces
# after an event, answers tagged with another command's id passed over, a
# QMP error reported with its description, arguments passed as JSON, and a
# server that hangs up. And migrate-qemu against a QEMU whose RAM file is
# mapped from an offset (QEMU 8.1's memory-backend-file offset=; Debian 12
# has 7.2): refused before anything is stopped, as the holder would serve
# the file from its start, the wrong bytes; and a qom-list answer that is
# no list, reported (json-c asserted on it before).
. "$SRC/tests/lib.sh"
command -v python3 >/dev/null || skip "python3 missing"
S=$T/qmp.sock
RAM=/dev/shm/uffdd-qmp-test.$$
on_cleanup "rm -f $RAM"
python3 - "$S" "$RAM" >"$T/server.log" 2>&1 <<'PY' &
import json, mmap, os, socket, sys, threading, time
path, ram = sys.argv[1:3]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(4)
# Mapped as QEMU 8.1 maps memory-backend-file,offset=4096,size=1M.
fd = os.open(ram, os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 4096 + (1 << 20))
ram_map = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED, offset=4096)
OBJ = {"mem-path": ram, "size": 1 << 20, "share": True, "offset": 4096}
ODD = []
def send(c, o, pieces=1):
    b = (json.dumps(o) + "\r\n").encode()
    step = max(1, len(b) // pieces)
    for i in range(0, len(b), step):
        c.sendall(b[i:i + step])
        time.sleep(0.01)
def serve(c):
    f = c.makefile("rb")
    send(c, {"QMP": {"version": {}, "capabilities": []}})
    caps = False
    for line in f:
        m = json.loads(line)
        cmd = m["execute"]
        args = m.get("arguments", {})
        print(cmd, json.dumps(args), flush=True)
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
        elif cmd == "odd-objects":
            ODD.append(1)
            send(c, {"return": {}, "id": m.get("id")})
        elif cmd == "qom-list" and args.get("path") == "/objects" and ODD:
            send(c, {"return": {"ram0": "not a list"}, "id": m.get("id")})
        elif cmd == "qom-list" and args.get("path") == "/objects":
            send(c, {"return": [{"name": "ram0", "type": "child<memory-backend-file>"},
                                {"name": "other", "type": "child<secret>"}], "id": m.get("id")})
        elif cmd == "qom-list" and args.get("path") == "/objects/ram0":
            send(c, {"return": [{"name": k, "type": "x"} for k in OBJ], "id": m.get("id")})
        elif cmd == "qom-get" and args.get("path") == "/objects/ram0" and args.get("property") in OBJ:
            send(c, {"return": OBJ[args["property"]], "id": m.get("id")})
        elif cmd == "hangup":
            break
        else:
            send(c, {"error": {"class": "CommandNotFound", "desc": "The command %s has not been found" % cmd}})
    f.close()
    c.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
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
if checked "$T/err" "$CLIENT" qmp "$S" no-such-command; then
	fail "a QMP error exited 0"
fi
grep -q 'no-such-command: The command no-such-command has not been found' "$T/err" ||
	fail "QMP error not reported: $(cat "$T/err")"
checked "$T/err" "$CLIENT" qmp "$S" echo '{not json' && fail "bad JSON arguments accepted"
grep -q 'not JSON' "$T/err" || fail "bad JSON arguments: $(cat "$T/err")"
if checked "$T/err" "$CLIENT" qmp "$S" hangup; then
	fail "a server that hung up gave success"
fi
grep -q 'QEMU closed QMP' "$T/err" || fail "hang-up not reported: $(cat "$T/err")"
if checked "$T/err" "$CLIENT" qmp "$T/none.sock" query-status; then
	fail "no QMP socket gave success"
fi
grep -q 'is QEMU running with -qmp' "$T/err" || fail "missing socket: $(cat "$T/err")"
info "QMP client: returns, events in between, other ids, errors, arguments, hang-ups"

before=$(wc -l <"$T/server.log")
if checked "$T/err" "$CLIENT" migrate-qemu --src-qmp "$S" --dst-qmp "$S" --src-control "$T/none.sock" \
	--dst-control "$T/none.sock" --src-peer 127.0.0.1:1; then
	fail "migrate-qemu took a RAM file mapped from an offset"
fi
grep -q "RAM block ram0 maps $RAM from offset 4096" "$T/err" ||
	fail "offset not refused: $(cat "$T/err")"
tail -n +$((before + 1)) "$T/server.log" | grep -v '^\(qmp_capabilities\|qom-list\|qom-get\) ' &&
	fail "more than queries before the refusal: $(cat "$T/server.log")"
info "migrate-qemu: a RAM file mapped from an offset refused, nothing but queries sent"

# A qom-list answer that is no list: an error, not a crash.
"$CLIENT" qmp "$S" odd-objects >/dev/null || fail "odd-objects failed"
if checked "$T/err" "$CLIENT" migrate-qemu --src-qmp "$S" --dst-qmp "$S" --src-control "$T/none.sock" \
	--dst-control "$T/none.sock" --src-peer 127.0.0.1:1; then
	fail "migrate-qemu took an /objects that is no list"
fi
grep -q 'qom-list /objects: not a list' "$T/err" || fail "odd qom-list: $(cat "$T/err")"
info "migrate-qemu: a qom-list answer that is no list is reported"
