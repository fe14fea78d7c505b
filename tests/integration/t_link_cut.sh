#!/usr/bin/env bash
# The link between the source host and the destination host (two network
# namespaces joined by veth) goes down for 5 s, three times in one
# migration. Each time the destination notices, pauses with its
# faulting threads waiting, reconnects, tells the source what it holds and
# resumes. The result is byte-exact. Then once more after the target
# forked and exited: its child alone is migrated on, across the cut.
. "$SRC/tests/lib.sh"
need_root
make_hosts
start_daemon src --bulk-rate 8M
start_daemon dst
paced_migration src dst 128M 0x500000000000

state() { "$CLIENT" --control "$dst_SOCK" status "$ID" --json | sed 's/.*"state":"\([a-z]*\)".*/\1/'; }
for i in 1 2 3; do
	sleep 2
	[ "$(state)" = complete ] && fail "migration finished before cut $i: the test proves nothing"
	cut_link "$src_PORT"
	info "link cut $i ($(state))"
	sleep 5
	info "after 5 s: $(state)"
	heal_link
	# The next cut must find the migration resumed, or it cuts a pause
	# and the reconnects are fewer than the cuts (seen under load).
	for _ in $(seq 300); do
		[ "$(state)" != paused ] && break
		sleep 0.1
	done
	info "link back ($(state))"
done
paced_finish dst
JSON=$("$CLIENT" --control "$dst_SOCK" status "$ID" --json)
rc=$(echo "$JSON" | sed 's/.*"reconnects":\([0-9]*\).*/\1/')
info "reconnects: $rc"
[ "$rc" -ge 3 ] || fail "expected 3 reconnects, saw $rc: $JSON"
grep -q "paused" "$T/dst.log" || fail "destination never paused"

# The target forks and exits (as a daemon detaches) before the cut: the
# resume's HAVE must name only what the child holds, or the source never
# sends the rest. The child touches nothing until the migration is
# complete.
paced_migration src dst 128M 0x510000000000 --event fork-exit
idle_child WD
sleep 2
[ "$(state)" = running ] || fail "fork-exit: migration $(state) before the cut"
cut_link "$src_PORT"
sleep 5
heal_link
info "fork-exit: link cut and back ($(state))"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >"$T/wait.out" ||
	fail "fork-exit: $(cat "$T/wait.out")"
[ "$(dst_hash H_SRC "$CHILD" "$M_BASE" "$M_END")" = "$H_SRC" ] ||
	fail "fork-exit: the child differs from the source"
kill -USR1 "$CHILD"
wait_child_verified WD "fork-exit, link cut"
