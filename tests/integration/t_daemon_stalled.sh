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

paced_migration src dst 192M 0x500000000000
sleep 1.5
[ "$(field state)" = running ] || fail "migration not running before the stop: $(status)"
# Both of its processes: the engine runs the migration.
DST_PIDS=$(daemon_pids dst)
on_cleanup kill -CONT $DST_PIDS
kill -STOP $DST_PIDS
sleep 5
kill -CONT $DST_PIDS
# Awake, and its loop has run since: the timers that were due in the
# stop have fired, and pages arrive again.
p0=$(field pages_present)
for _ in $(seq 300); do
	[ "$(field pages_present)" -gt "$p0" ] && break
	sleep 0.05
done
[ "$(field pages_present)" -gt "$p0" ] || fail "no page arrived after the destination woke: $(status)"
[ "$(field state)" = running ] || fail "not running after the destination woke: $(status)"
[ "$(field reconnects)" = 0 ] ||
	fail "destination declared a live source lost after its own stop: $(status)"
grep -q "source lost" "$T/dst.log" && fail "destination logged the source lost"
info "destination stopped 5 s: no reconnect"

[ "$(field state)" = running ] ||
	fail "migration not running before the source's stop: the test proves nothing"
SRC_PIDS=$(daemon_pids src)
on_cleanup kill -CONT $SRC_PIDS
kill -STOP $SRC_PIDS
sleep 5
kill -CONT $SRC_PIDS
paced_finish dst
rc=$(status | sed 's/.*"reconnects":\([0-9]*\).*/\1/')
info "source stopped 5 s: $rc reconnect(s)"
[ "$rc" -ge 1 ] || fail "a source silent for 5 s went unnoticed: $(status)"
