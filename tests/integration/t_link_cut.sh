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
start_workload WS source --size 128M --threads 2
start_workload WD dest --size 128M --threads 4 --pace-us 1500 --prefault
RANGE=500000000000-500008000000
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
H_SRC=$("$MEMHASH" "$WS" 0x500000000000 0x500008000000)
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >/dev/null
kill -USR1 "$WD"

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
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" || fail "wait: $(cat "$T/wait.out")"
wait_verified WD
H_DST=$("$MEMHASH" "$WD" 0x500000000000 0x500008000000)
[ "$H_SRC" = "$H_DST" ] || fail "destination differs from the source"
JSON=$("$CLIENT" --control "$dst_SOCK" status "$ID" --json)
rc=$(echo "$JSON" | sed 's/.*"reconnects":\([0-9]*\).*/\1/')
info "reconnects: $rc"
[ "$rc" -ge 3 ] || fail "expected 3 reconnects, saw $rc: $JSON"
grep -q "paused" "$T/dst.log" || fail "destination never paused"
