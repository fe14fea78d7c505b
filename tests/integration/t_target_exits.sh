#!/usr/bin/env bash
# The target process exits mid-migration: both sides fail with the reason,
# the destination's resources go, and the source process is left stopped.
. "$SRC/tests/lib.sh"
need_root
start_daemon src --bulk-rate 4M
start_daemon dst
start_workload WS source --size 64M --threads 1
start_workload WD dest --size 64M --threads 2
RANGE=500000000000-500004000000
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >/dev/null
sleep 0.5
kill -9 "$WD"
info "target killed"
if checked "$T/wd.out" "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 30; then
	fail "destination completed without a target"
fi
grep -q "target process .* exited" "$T/wd.out" || fail "destination reason: $(cat "$T/wd.out")"
if checked "$T/ws.out" "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 30; then
	fail "source completed without a destination"
fi
grep -q "destination" "$T/ws.out" || fail "source reason: $(cat "$T/ws.out")"
info "source: $(cat "$T/ws.out")"
[ "$(proc_state "$WS")" = T ] || fail "source process not left stopped"
for p in $(daemon_pids dst); do
	ls -l "/proc/$p/fd" | grep -q userfaultfd && fail "destination daemon (pid $p) still holds a userfaultfd"
done
true
