#!/usr/bin/env bash
# A daemon cannot write a migration's state file (its state directory is
# full). The source refuses the export, saying so, and the process runs on.
# (Taken, the export was served with no state file: a restart of the daemon
# would have forgotten it and left the process frozen for good.) The
# destination refuses the attach before it touches the target. With room
# again both go through, and the migration is byte-exact. Then a later
# write fails: the destination's target discards pages while its state
# directory is full. The file on disk no longer says what the target did,
# so it goes, with a word in the log (restored, it would have given the
# discarded pages the source's bytes), and the migration still completes
# right.
. "$SRC/tests/lib.sh"
need_root
# mode=0700: a tmpfs root is 1777 by default, and a state directory that
# others may write is refused.
mkdir -p "$T/full"
mount -t tmpfs -o size=64k,mode=0700 uffdd-state-full "$T/full" || skip "cannot mount a tmpfs"
on_cleanup "umount -l $T/full"
start_daemon src --state-dir "$T/full"
start_workload WS source --size 16M --threads 1
dd if=/dev/zero of="$T/full/fill" bs=4k count=1000 2>/dev/null || true
if checked "$T/out" "$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000; then
	fail "export succeeded with no room for its state: $(cat "$T/out")"
fi
grep -q "cannot save its state.*No space left on device" "$T/out" || fail "refusal does not say why: $(cat "$T/out")"
info "refused: $(cat "$T/out")"
[ "$(proc_state "$WS")" != T ] || fail "the refused export left the process stopped"
"$CLIENT" --control "$src_SOCK" status | grep -q "no migrations" || fail "the refused export is still listed"
rm -f "$T/full/fill"
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000) ||
	fail "export refused with room again"
[ -f "$(state_dir src)/$ID.source.state" ] || fail "no state file for $ID"
info "with room again: exported as $ID, state file written"

# The destination side.
mkdir -p "$T/full2"
mount -t tmpfs -o size=64k,mode=0700 uffdd-state-full2 "$T/full2" || skip "cannot mount a tmpfs"
on_cleanup "umount -l $T/full2"
start_daemon dst --state-dir "$T/full2"
start_workload WD dest --size 16M --threads 2
h_before=$(mem_state "$WD" 0x500000000000 0x500001000000)
dd if=/dev/zero of="$T/full2/fill" bs=4k count=1000 2>/dev/null || true
if checked "$T/out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" --id "$ID" \
	--range 500000000000-500001000000; then
	fail "attach succeeded with no room for its state: $(cat "$T/out")"
fi
grep -q "cannot save its state.*No space left on device" "$T/out" || fail "attach refusal does not say why: $(cat "$T/out")"
info "attach refused: $(cat "$T/out")"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "the refused attach left a userfaultfd in the target"
[ "$(mem_state "$WD" 0x500000000000 0x500001000000)" = "$h_before" ] || fail "the refused attach changed the target"
rm -f "$T/full2/fill"
src_hash H_SRC "$WS" 0x500000000000 0x500001000000
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" --id "$ID" \
	--range 500000000000-500001000000 >/dev/null || fail "attach refused with room again"
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >/dev/null || fail "no completion"
wait_verified WD >/dev/null
[ "$(dst_hash H_SRC "$WD" 0x500000000000 0x500001000000)" = "$H_SRC" ] || fail "destination differs from the source"
info "with room again: attached, complete, byte-exact"

start_daemon srcr --bulk-rate 4M --state-dir "$T/full"
start_workload WS2 source --size 16M --threads 1 --base 0x510000000000
start_workload WD2 dest --size 16M --threads 2 --base 0x510000000000 --event remove
ID2=$("$CLIENT" --control "$srcr_SOCK" export "$WS2" --range 510000000000-510001000000) ||
	fail "second export refused"
"$CLIENT" --control "$dst_SOCK" attach "$WD2" --from "127.0.0.1:$srcr_PORT" --id "$ID2" \
	--range 510000000000-510001000000 >/dev/null || fail "second attach refused"
[ -f "$(state_dir dst)/$ID2.destination.state" ] || fail "no state file for $ID2"
dd if=/dev/zero of="$T/full2/fill" bs=4k count=1000 2>/dev/null || true
kill -USR1 "$WD2"
for _ in $(seq 100); do
	grep -q "migration ${ID2:0:8}.*state file could not be brought up to date and is removed" "$T/dst.log" && break
	sleep 0.1
done
grep -q "migration ${ID2:0:8}.*state file could not be brought up to date and is removed" "$T/dst.log" ||
	fail "no word of the stale state file: $(tail -n 5 "$T/dst.log")"
[ -f "$(state_dir dst)/$ID2.destination.state" ] && fail "the stale state file of $ID2 is still there"
rm -f "$T/full2/fill"
"$CLIENT" --control "$dst_SOCK" wait "$ID2" --timeout 120 >/dev/null || fail "no completion after the failed write"
wait_verified WD2 >/dev/null
info "a later write failed: stale state file removed, said so; complete, $(grep '^verified' "$T/WD2.out")"
