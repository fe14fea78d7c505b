#!/usr/bin/env bash
# A QEMU guest moved between two hosts with pre-copy (migrate-qemu send
# --precopy; docs/qemu-two-hosts.md, "Pre-copy for guests"): the RAM files
# stream in rounds while the guest runs its memory checker, QEMU's writes
# tracked in QEMU (export --track-unstopped), the destination QEMU not
# held meanwhile (attach --precopy-no-hold, which receive asks); once the
# rounds converge the guest stops, go sends what it wrote last and returns
# once the destination switched over, and QEMU sends its device state.
# Both halves exit 0 and say how the guest moved; the destination, left
# paused until every page is resident, holds the source's RAM byte for
# byte; its guest's checker passes once it runs; most pages came in the
# rounds, not by post-copy faults; the source QEMU has exited.
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
. "$SRC/tests/e2e/qemu-hosts.sh"
make_hosts
start_daemon src
start_daemon dst

QEMU_NS=$NS_SRC qemu a
QEMU_NS=$NS_DST qemu b -incoming defer -S
info "booting the guest on the source host"
runs_on a 2

info "A (source host) -> B (destination host), pre-copy then post-copy"
id=$(new_id)
port=$(in_port)
receive b src "$id" "$port" --timeout 300 --no-resume
sleep 1
send a src "$id" "$port" --precopy
finish_both a b
grep -q 'pre-copy converged: [0-9]* rounds' "$T/send-a.err" ||
	fail "send did not say the pre-copy converged: $(cat "$T/send-a.err")"
grep -q 'the destination switched over' "$T/send-a.err" ||
	fail "send did not say the destination switched over: $(cat "$T/send-a.err")"
gone "${QPID[a]}"
precopied "$id" "${QPID[a]}"
grep -q "not held during the pre-copy" "$T/dst.log" ||
	fail "the destination QEMU was held during the pre-copy"
same_ram a b
runs_on b 3
info "B: $ROUNDS rounds, $FAULTS post-copy faults of $TOTAL pages; $(tail -n 1 "$T/b.serial")"
