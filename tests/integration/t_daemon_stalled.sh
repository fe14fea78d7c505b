#!/usr/bin/env bash
# A daemon that does not run for a while (stopped, starved of CPU on a
# loaded host) is not a lost peer. The destination daemon is stopped for
# 5 s, longer than a lane's read timeout, in the middle of a migration:
# the source's pings wait in its sockets, so on waking it carries on
# without declaring the source lost and without reconnecting. The source
# daemon is then stopped for 5 s: that one is silent for real, the
# destination pauses and reconnects. Both results byte-exact.
. "$SRC/tests/lib.sh"
need_root
make_hosts
start_daemon src --bulk-rate 8M
start_daemon dst
status() { "$CLIENT" --control "$dst_SOCK" status "$ID" --json; }
field() { status | sed "s/.*\"$1\":\"\\{0,1\\}\\([a-z0-9]*\\).*/\\1/"; }

start_workload WS source --size 96M --threads 2
start_workload WD dest --size 96M --threads 4 --pace-us 1500 --prefault
RANGE=500000000000-500006000000
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
H_SRC=$("$MEMHASH" "$WS" 0x500000000000 0x500006000000)
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >/dev/null
kill -USR1 "$WD"
sleep 1.5
[ "$(field state)" = running ] || fail "migration not running before the stop: $(status)"
on_cleanup kill -CONT "$dst_PID"
kill -STOP "$dst_PID"
sleep 5
kill -CONT "$dst_PID"
sleep 1.5
[ "$(field state)" = running ] || fail "not running after the destination woke: $(status)"
[ "$(field reconnects)" = 0 ] ||
	fail "destination declared a live source lost after its own stop: $(status)"
grep -q "source lost" "$T/dst.log" && fail "destination logged the source lost"
info "destination stopped 5 s: no reconnect"

on_cleanup kill -CONT "$src_PID"
kill -STOP "$src_PID"
sleep 5
kill -CONT "$src_PID"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" || fail "wait: $(cat "$T/wait.out")"
wait_verified WD
H_DST=$("$MEMHASH" "$WD" 0x500000000000 0x500006000000)
[ "$H_SRC" = "$H_DST" ] || fail "destination differs from the source"
rc=$(status | sed 's/.*"reconnects":\([0-9]*\).*/\1/')
info "source stopped 5 s: $rc reconnect(s)"
[ "$rc" -ge 1 ] || fail "a source silent for 5 s went unnoticed: $(status)"
