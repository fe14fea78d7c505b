#!/usr/bin/env bash
# attach --map: the target maps the memory at another address than the
# source (as two QEMUs map guest RAM), and the source region is mapped onto
# the target's by address pair; a tmpfs file (a VMM's RAM file) and
# anonymous memory, byte-exact. Unmapped source regions are not taken.
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
A=0x500000000000
B=0x5a0000000000
for kind in tmpfs anon; do
	start_workload WS source --size 64M --threads 2 --base $A --kind "$kind"
	start_workload WD dest --size 64M --threads 4 --base $B --kind "$kind" --prefault
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500004000000)
	H_SRC=$("$MEMHASH" "$WS" $A $((A + (64 << 20))))
	# Without the map nothing matches: the addresses differ.
	if "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$ID" >"$T/out" 2>&1; then
		fail "attach without --map matched a region at another address"
	fi
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$ID" --map 500000000000:5a0000000000 >"$T/attach.out" 2>&1 ||
		fail "attach --map: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >/dev/null || fail "$kind: no completion"
	wait_verified WD >/dev/null
	H_DST=$("$MEMHASH" "$WD" $B $((B + (64 << 20))))
	[ "$H_SRC" = "$H_DST" ] || fail "$kind: destination at $B differs from the source at $A"
	info "$kind: source at $A, target at $B: byte-exact"
	kill "$WD"
done

# Two source regions (a read-only page range splits one mapping) mapped
# onto overlapping ranges of the target: refused, the target untouched.
# (Taken, both were registered and installed into the same pages.)
start_workload WS source --size 64M --threads 1 --base $A --ro-pages 256
start_workload WD dest --size 64M --threads 1 --base $B
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500004000000)
h_before=$("$MEMHASH" "$WD" $B $((B + (64 << 20))))
if "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" --id "$ID" \
	--map 500000000000:5a0000000000 --map 500002100000:5a0000100000 >"$T/out" 2>&1; then
	fail "attach with overlapping maps succeeded: $(cat "$T/out")"
fi
grep -q "would both go to" "$T/out" || fail "overlapping maps: $(cat "$T/out")"
info "overlapping maps refused: $(cat "$T/out")"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "refused attach left a userfaultfd in the target"
[ "$("$MEMHASH" "$WD" $B $((B + (64 << 20))))" = "$h_before" ] || fail "refused attach changed the target"
