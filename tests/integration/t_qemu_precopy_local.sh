#!/usr/bin/env bash
# A QEMU guest pre-copied between two QEMUs of one host (migrate-qemu
# --precopy: the two-host halves run in one process; docs/operations.md,
# "QEMU postcopy"): the RAM files stream in rounds while the guest runs
# its memory checker, QEMU's writes tracked in QEMU, then the guest stops,
# go sends what it wrote last, and QEMU sends its device state. The
# destination, left paused until every page is resident, holds the
# source's RAM byte for byte and its guest's checker passes; most pages
# came in the rounds, not by post-copy faults. A destination
# QEMU on the source's RAM file is refused before anything is exported,
# and the source is left as it was. A source daemon that cannot track
# writes to shared memory moves the guest post-copy, saying so.
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
start_daemon src
start_daemon dst

qemu a
info "booting the guest on A"
runs_on a 2

# A destination QEMU on the source's own RAM file: the attach would punch
# it. Refused before anything is exported; A runs on, its capabilities
# as they were, and the destination is told to quit.
RAM_FILE=$SHM-a qemu x -incoming defer -S
if checked "$T/same.out" migrate_qemu a x --precopy; then
	fail "migrate-qemu --precopy onto the source's own RAM file succeeded"
fi
grep -q "is the destination's $SHM-a too" "$T/same.out" ||
	fail "no word of the shared RAM file: $(cat "$T/same.out")"
grep -q 'exported' "$T/same.out" && fail "exported before the refusal: $(cat "$T/same.out")"
grep -q 'never started.*quit it' "$T/same.out" ||
	fail "not told what to do with the destination: $(cat "$T/same.out")"
qmp a query-migrate-capabilities | tr -d ' \n' |
	grep -q '"state":true,"capability":"x-ignore-shared"\|"capability":"x-ignore-shared","state":true' &&
	fail "x-ignore-shared left on for A after the refusal"
"$CLIENT" --control "$src_SOCK" status >"$T/src-status.out"
grep -qx 'no migrations' "$T/src-status.out" ||
	fail "the refused flow left a migration at the source daemon: $(cat "$T/src-status.out")"
kill "${QPID[x]}"
runs_on a 2

qemu b -incoming defer -S
info "A -> B on one host, pre-copy then post-copy, B paused until resident"
checked "$T/ab.out" migrate_qemu a b --precopy --no-resume ||
	fail "migrate-qemu --precopy A -> B failed: $(cat "$T/ab.out")"
sed 's/^/  /' "$T/ab.out"
id=$(sed -n 's/.*source RAM exported, .*: migration \([^ ]*\)$/\1/p' "$T/ab.out")
[ -n "$id" ] || fail "the flow named no migration"
grep -q 'pre-copy converged: [0-9]* rounds' "$T/ab.out" ||
	fail "the flow did not say the pre-copy converged"
grep -q 'the destination switched over' "$T/ab.out" ||
	fail "the flow did not say the destination switched over"
gone "${QPID[a]}"
precopied "$id" "${QPID[a]}"
# B started as the commit came: its copy of the userfaultfd goes a little
# later (not in its start), but goes.
for _ in $(seq 40); do
	ls -l "/proc/${QPID[b]}/fd" | grep -q 'anon_inode:\[userfaultfd\]' || break
	sleep 0.1
done
ls -l "/proc/${QPID[b]}/fd" | grep -q 'anon_inode:\[userfaultfd\]' &&
	fail "B still holds a userfaultfd 4 s after its migration completed"
cmp "$SHM-a" "$SHM-b" || fail "B's RAM file differs from A's"
info "B's RAM file equals A's byte for byte ($(sha256sum <"$SHM-b" | cut -c1-16))"
qmp b cont >/dev/null || fail "cont on B"
runs_on b 3
info "B: $ROUNDS rounds, $FAULTS post-copy faults of $TOTAL pages; $(tail -n 1 "$T/b.serial")"

# A source daemon whose kernel cannot track writes to shared memory (the
# test knob hides the async tracker): --precopy says so and the guest
# moves post-copy, byte for byte all the same.
export UFFDD_TEST_NO_WP_TRACKING=1
start_daemon src2
unset UFFDD_TEST_NO_WP_TRACKING
qemu c -incoming defer -S
info "B -> C from a daemon that cannot track: post-copy instead"
SD=src2 checked "$T/bc.out" migrate_qemu b c --precopy --no-resume ||
	fail "migrate-qemu --precopy B -> C (no tracking) failed: $(cat "$T/bc.out")"
grep -q 'the guest moves post-copy instead' "$T/bc.out" ||
	fail "the flow did not say it fell back to post-copy: $(cat "$T/bc.out")"
grep -q 'pre-copy converged' "$T/bc.out" && fail "a pre-copy without a tracker: $(cat "$T/bc.out")"
gone "${QPID[b]}"
cmp "$SHM-b" "$SHM-c" || fail "C's RAM file differs from B's"
qmp c cont >/dev/null || fail "cont on C"
runs_on c 3
info "C (post-copy, no tracker): $(tail -n 1 "$T/c.serial")"
