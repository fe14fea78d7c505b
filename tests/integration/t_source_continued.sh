#!/usr/bin/env bash
# Someone else sends SIGCONT to the frozen source process: it runs and
# writes pages that were classified, or already sent, while frozen. The
# migration must not end as if nothing happened: the source fails it,
# saying why, the destination learns it, and the source process (which now
# holds the newest bytes) is not killed. Once during a migration, once
# between export and attach.
. "$SRC/tests/lib.sh"
need_root
start_daemon src --bulk-rate 4M
start_daemon dst
RANGE=500000000000-500002000000
state() { "$CLIENT" --control "$1" status "$2" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }
reason() { "$CLIENT" --control "$1" status "$2" --json | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p'; }
wait_state() {
	for _ in $(seq 100); do
		[ "$(state "$1" "$2")" = "$3" ] && return
		sleep 0.1
	done
	fail "$4: state $(state "$1" "$2"), not $3, 10 s after the SIGCONT"
}

info "continued during the migration"
start_workload WS source --size 32M --threads 2
start_workload WD dest --size 32M --touch 0
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE" >/dev/null
sleep 1
[ "$(state "$dst_SOCK" "$ID")" = running ] || fail "migration not running before the SIGCONT"
kill -CONT "$WS"
wait_state "$src_SOCK" "$ID" failed "source"
reason "$src_SOCK" "$ID" | grep -q "continued" || fail "source reason: $(reason "$src_SOCK" "$ID")"
info "source: $(reason "$src_SOCK" "$ID")"
wait_state "$dst_SOCK" "$ID" failed "destination"
reason "$dst_SOCK" "$ID" | grep -q "continued" || fail "destination reason: $(reason "$dst_SOCK" "$ID")"
info "destination: $(reason "$dst_SOCK" "$ID")"
kill -0 "$WS" 2>/dev/null && [ "$(proc_state "$WS")" != Z ] || fail "the continued source process was killed"
kill -9 "$WS" "$WD"

info "continued between export and attach"
start_workload WS source --size 32M --threads 2
start_workload WD dest --size 32M --touch 0
h_dst=$("$MEMHASH" "$WD" 0x500000000000 0x500002000000)
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
kill -CONT "$WS"
wait_state "$src_SOCK" "$ID" failed "export"
if "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE" >"$T/out" 2>&1; then
	fail "attach to a continued export succeeded: $(cat "$T/out")"
fi
grep -q "continued" "$T/out" || fail "attach refusal does not say why: $(cat "$T/out")"
info "attach refused: $(cat "$T/out")"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "refused attach left a userfaultfd in the target"
[ "$("$MEMHASH" "$WD" 0x500000000000 0x500002000000)" = "$h_dst" ] || fail "refused attach changed the target"
kill -0 "$src_PID" && kill -0 "$dst_PID" || fail "a daemon died"
