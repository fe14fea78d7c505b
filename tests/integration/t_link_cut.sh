#!/usr/bin/env bash
# The link between the source host and the destination host (two network
# namespaces joined by veth) goes down for 5 s, three times in one
# migration. Each time the destination notices, pauses with its
# faulting threads waiting, reconnects, tells the source what it holds and
# resumes. The result is byte-exact.
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
	info "link back"
done
paced_finish dst
JSON=$("$CLIENT" --control "$dst_SOCK" status "$ID" --json)
rc=$(echo "$JSON" | sed 's/.*"reconnects":\([0-9]*\).*/\1/')
info "reconnects: $rc"
[ "$rc" -ge 3 ] || fail "expected 3 reconnects, saw $rc: $JSON"
grep -q "paused" "$T/dst.log" || fail "destination never paused"
