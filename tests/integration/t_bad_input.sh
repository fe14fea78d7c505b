#!/usr/bin/env bash
# Bad input gets a clear error and changes nothing: both processes keep
# running, untouched, and the daemons keep serving.
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
start_workload WS source --size 16M --threads 1
start_workload WD dest --size 16M --threads 2
RANGE=500000000000-500001000000
dst_state() { mem_state "$WD" 0x500000000000 0x500001000000; }
h_before=$(dst_state)

untouched() {
	[ "$(proc_state "$WS")" != T ] || fail "$1: source process left stopped"
	[ "$(proc_state "$WD")" != T ] && [ "$(proc_state "$WD")" != t ] ||
		fail "$1: destination process left stopped"
	ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "$1: destination got a userfaultfd"
	[ "$(dst_state)" = "$h_before" ] || fail "$1: destination memory changed"
	kill -0 "$src_PID" && kill -0 "$dst_PID" || fail "$1: a daemon died"
}

# A PID that does not exist.
dead=$(sh -c 'echo $$')
expect_error "export missing pid" "no such process" \
	"$CLIENT" --control "$src_SOCK" export "$dead"
expect_error "attach missing pid" "no such process" \
	"$CLIENT" --control "$dst_SOCK" attach "$dead" --from "$src_ADDR:$src_PORT" \
	--id 0123456789abcdef0123456789abcdef
expect_error "export bad pid" "not a process ID" "$CLIENT" --control "$src_SOCK" export abc
untouched "missing pid"

# Export with ranges that hold no memory of the process.
expect_error "export no region" "no memory uffdd migrates" \
	"$CLIENT" --control "$src_SOCK" export "$WS" --range 100000-200000
untouched "export no region"

# Now a real export, then attach errors against it.
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
[ "$(proc_state "$WS")" = T ] || fail "export did not freeze the source"
# The same process again: refused, the first export untouched (the real
# attach at the end still works).
expect_error "second export" "already exported as $ID" \
	"$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE"
expect_error "second export, deferred" "already exported as $ID" \
	"$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE" --deferred
[ "$(proc_state "$WS")" = T ] || fail "a refused export thawed the source"

# Unreachable source: a port bound but not listening, held so.
hold_port closed
expect_error "unreachable source" "unreachable" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$closed" --id "$ID"
# Plaintext to a non-loopback address: t_tls_refusals (no packet may leave
# loopback here, and these daemons may be using TLS).
# A wrong ID.
expect_error "wrong id" "unknown migration ID" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id ffffffffffffffffffffffffffffffff
expect_error "malformed id" "malformed migration ID" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" --id nope
# A target with no region matching the source's: a shorter mapping.
start_workload WX dest --size 8M --threads 1
expect_error "no matching region" "no region of process" \
	"$CLIENT" --control "$dst_SOCK" attach "$WX" --from "$src_ADDR:$src_PORT" --id "$ID"
ls -l "/proc/$WX/fd" | grep -q userfaultfd && fail "no-match target got a userfaultfd"
# Source regions outside the destination's --range do not match either.
expect_error "range excludes all" "no region of process" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range 700000000000-700000001000
[ "$(dst_state)" = "$h_before" ] || fail "attach errors changed the destination's memory"
[ "$(proc_state "$WS")" = T ] || fail "source left its frozen state"
kill -0 "$src_PID" && kill -0 "$dst_PID" || fail "a daemon died"

# Unknown IDs in status and wait.
expect_error "status unknown id" "unknown migration ID" \
	"$CLIENT" --control "$dst_SOCK" status ffffffffffffffffffffffffffffffff
# wait took the daemon's refusal for a lost daemon and asked again forever.
expect_error "wait unknown id" "unknown migration ID" \
	timeout 20 "$CLIENT" --control "$dst_SOCK" wait ffffffffffffffffffffffffffffffff --timeout 10
# No daemon at the socket.
expect_error "daemon not running" "not running" "$CLIENT" --control "$T/none.sock" status
# Bad ranges and usage.
expect_error "bad range" "want START-END" "$CLIENT" --control "$src_SOCK" export "$WS" --range 5-1
expect_error "unknown command" "unknown command" "$CLIENT" frobnicate
# Usage errors exit 2 before anything reaches a daemon: an empty ID (it
# meant "every migration" to the daemon), a timeout that is not a number
# of seconds, two maps of one source region or onto one address.
expect_usage() {
	local name=$1 pat=$2 rc=0
	shift 2
	SAN_WHO="expect_usage $name" checked "$T/out" "$@" || rc=$?
	[ "$rc" = 2 ] || fail "$name: exit $rc, not 2: $(cat "$T/out")"
	grep -qi -- "$pat" "$T/out" || fail "$name: error does not say '$pat': $(cat "$T/out")"
	info "$name: $(head -n 1 "$T/out")"
}
expect_usage "wait empty id" "not a migration ID" "$CLIENT" --control "$dst_SOCK" wait ""
expect_usage "status short id" "not a migration ID" "$CLIENT" --control "$dst_SOCK" status 0123
expect_usage "timeout nan" "usage" "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout nan
expect_usage "timeout inf" "usage" "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout inf
expect_usage "map twice from one region" "same source region" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" --id "$ID" \
	--map 500000000000:600000000000 --map 500000000000:700000000000
expect_usage "map twice onto one address" "same target address" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" --id "$ID" \
	--map 500000000000:600000000000 --map 510000000000:600000000000
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "usage errors: destination got a userfaultfd"
[ "$(dst_state)" = "$h_before" ] || fail "usage errors: destination memory changed"

# After all of that, the export still works: a real attach succeeds.
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" --wait >"$T/attach.out" 2>&1 ||
	fail "attach after errors: $(cat "$T/attach.out")"
info "attach after the errors completed"

# A caller that is not root cannot use the control socket at all.
if command -v setpriv >/dev/null; then
	expect_error "non-root caller" "permission denied" \
		setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$CLIENT" --control "$dst_SOCK" status
else
	skip_part "non-root caller: setpriv missing (util-linux)"
fi
