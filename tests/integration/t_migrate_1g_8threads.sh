#!/usr/bin/env bash
# 1 GiB, 8 destination threads faulting at once while the bulk lane streams.
. "$SRC/tests/lib.sh"
need_root
migrate 1G 2 8
grep -q '"pages_total":262144' "$T/status.json" || fail "status: $(cat "$T/status.json")"
grep -q '"pages_present":262144' "$T/status.json" || fail "status: $(cat "$T/status.json")"
# Blocktime: the checker threads of the target are named, with the time
# each spent blocked, and they are the target's own threads.
bt=$(sed 's/.*"blocktime_ms":\([0-9.]*\).*/\1/' "$T/status.json")
info "blocktime: $bt ms in all"
awk -v b="$bt" 'BEGIN { exit !(b > 0) }' || fail "no blocktime: $(cat "$T/status.json")"
tids=$(grep -o '"tid":[0-9]*' "$T/status.json" | cut -d: -f2)
[ "$(echo "$tids" | wc -w)" -ge 8 ] || fail "fewer than 8 threads blocked: $tids"
mine=" $(sed -n 's/^tids //p' "$T/WD.out") "
for t in $tids; do
	case $mine in *" $t "*) ;; *) fail "thread $t is not one of the target's checkers ($mine)" ;; esac
done
