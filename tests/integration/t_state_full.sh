#!/usr/bin/env bash
# The source daemon cannot write an export's state file (its state
# directory is full): the export is refused, saying so, and the process
# runs on. (Taken, the export was served with no state file: a restart of
# the daemon would have forgotten it and left the process frozen for good.)
# With room again, the same export goes through and its state file is there.
. "$SRC/tests/lib.sh"
need_root
mkdir -p "$T/full"
mount -t tmpfs -o size=64k uffdd-state-full "$T/full" || skip "cannot mount a tmpfs"
on_cleanup "umount -l $T/full"
start_daemon src --state-dir "$T/full"
start_workload WS source --size 16M --threads 1
dd if=/dev/zero of="$T/full/fill" bs=4k count=1000 2>/dev/null || true
if "$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000 >"$T/out" 2>&1; then
	fail "export succeeded with no room for its state: $(cat "$T/out")"
fi
grep -q "cannot save its state.*No space left on device" "$T/out" || fail "refusal does not say why: $(cat "$T/out")"
info "refused: $(cat "$T/out")"
[ "$(proc_state "$WS")" != T ] || fail "the refused export left the process stopped"
"$CLIENT" --control "$src_SOCK" status | grep -q "no migrations" || fail "the refused export is still listed"
rm -f "$T/full/fill"
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000) ||
	fail "export refused with room again"
[ -f "$T/full/$ID.state" ] || fail "no state file for $ID"
info "with room again: exported as $ID, state file written"
