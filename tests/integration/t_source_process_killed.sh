#!/usr/bin/env bash
# The source process dies mid-migration: the destination reports failure,
# poisons every page it does not have (the target gets SIGBUS on those), and
# no page of the target reads back wrong or as zeros.
. "$SRC/tests/lib.sh"
need_root
make_hosts
start_daemon src --bulk-rate 4M
start_daemon dst
"$CLIENT" --control "$dst_SOCK" status --json >/dev/null
grep -q "poison yes" "$T/dst.log" || skip "kernel has no UFFDIO_POISON (6.6+); the target would be stopped instead"
start_workload WS source --size 64M --threads 1
start_workload WD dest --size 64M --threads 4 --pace-us 300 --sigbus-ok
RANGE=500000000000-500004000000
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >/dev/null
kill -USR1 "$WD"
sleep 1
kill -9 "$WS"
info "source process killed"
if "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60 >"$T/wait.out" 2>&1; then
	fail "migration completed although its source died: $(cat "$T/wait.out")"
fi
info "wait: $(cat "$T/wait.out")"
grep -q "source process" "$T/wait.out" || fail "failure reason does not name the source process"
for _ in $(seq 600); do
	grep -q '^verified' "$T/WD.out" && break
	sleep 0.1
done
line=$(grep '^verified' "$T/WD.out") || fail "destination workload did not finish"
info "destination workload: $line"
echo "$line" | grep -q ' 0 mismatches' || fail "wrong bytes: $(cat "$T/WD.log")"
lost=$(echo "$line" | sed 's/.* \([0-9]*\) lost/\1/')
[ "$lost" -gt 0 ] || fail "no page was lost: the source died too late for the test to mean anything"
JSON=$("$CLIENT" --control "$dst_SOCK" status "$ID" --json)
echo "$JSON" | grep -q '"state":"failed"' || fail "status: $JSON"
echo "$JSON" | grep -q '"pages_lost":[1-9]' || fail "status does not count lost pages: $JSON"
