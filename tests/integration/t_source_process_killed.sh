#!/usr/bin/env bash
# The source process dies mid-migration: the destination reports failure,
# poisons every page it does not have (the target gets SIGBUS on those), and
# no page of the target reads back wrong or as zeros. Without UFFDIO_POISON
# (kernels before 6.6; the daemon's test knob makes this one behave so) the
# target is stopped instead and keeps its userfaultfd. The fallback half runs
# first: on a kernel without the ioctl the poison half is then skipped.
. "$SRC/tests/lib.sh"
need_root
make_hosts
start_daemon src --bulk-rate 4M
RANGE=500000000000-500004000000

# lose_source DST CHECK [WORKLOAD ARGS...]: a paced migration to daemon DST
# whose source process is killed after a second; the wait must fail. With
# CHECK=now the destination's threads check pages meanwhile (else they are
# started later with SIGUSR1, and the bulk lane sweeps from the start). Sets
# WS, WD and ID.
lose_source() {
	local sock check=$2
	sock=$(eval echo "\$${1}_SOCK")
	shift 2
	start_workload WS source --size 64M --threads 1
	start_workload WD dest --size 64M --threads 4 --pace-us 300 "$@"
	must "lose_source: export" "$T/export.out" "$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE"
	ID=$(cat "$T/export.out")
	must "lose_source: attach" "$T/attach.out" "$CLIENT" --control "$sock" attach "$WD" \
		--from "$src_ADDR:$src_PORT" --id "$ID" --range "$RANGE"
	[ "$check" = now ] && kill -USR1 "$WD"
	sleep 1
	kill -9 "$WS"
	info "source process killed"
	if SAN_WHO="lose_source: wait" checked "$T/wait.out" "$CLIENT" --control "$sock" wait "$ID" --timeout 60; then
		fail "migration completed although its source died: $(cat "$T/wait.out")"
	fi
	info "wait: $(cat "$T/wait.out")"
	grep -q "source process" "$T/wait.out" || fail "failure reason does not name the source process"
	"$CLIENT" --control "$sock" status "$ID" --json >"$T/status.json"
	grep -q '"state":"failed"' "$T/status.json" || fail "status: $(cat "$T/status.json")"
	grep -q '"pages_lost":[1-9]' "$T/status.json" ||
		fail "status does not count lost pages: $(cat "$T/status.json")"
}

# Without UFFDIO_POISON no missing page may read as zeros, not even when
# someone lets the stopped target go on.
export UFFDD_TEST_NO_POISON=1
start_daemon dst2
unset UFFDD_TEST_NO_POISON
lose_source dst2 later
grep -q "stopped (this kernel has no UFFDIO_POISON)" "$T/wait.out" ||
	fail "the reason does not say the target was stopped"
for _ in $(seq 50); do
	[ "$(proc_state "$WD")" = T ] && break
	sleep 0.1
done
[ "$(proc_state "$WD")" = T ] || fail "target not stopped: state $(proc_state "$WD")"
uffds=0
for f in "/proc/$WD/fd"/*; do
	[ "$(readlink "$f")" = "anon_inode:[userfaultfd]" ] && uffds=$((uffds + 1))
done
[ "$uffds" -gt 0 ] || fail "the stopped target has no userfaultfd left"
# The bulk lane swept the first MiB before the kill (4 MiB a second, nothing
# faulting): its pages came as data, or as ZERO markers that the destination
# leaves unpopulated until touched. They must read back, not block on a page
# that nobody will ever install.
timeout -s KILL 10 "$MEMHASH" "$WD" 0x500000000000 0x500000100000 >/dev/null ||
	fail "reading the stopped target's first MiB blocked or failed: a page that had come is not installed"
# Let it go on: threads that touch a lost page wait; none reads it wrong.
# Checked once all 4 checking threads wait in userfaultfd (each checks a
# quarter of the pages, every quarter has lost ones), so that none can
# read on later.
kill -CONT "$WD"
kill -USR1 "$WD"
blocked() {
	local t n=0
	for t in "/proc/$WD/task"/*/wchan; do
		[ "$(cat "$t" 2>/dev/null)" = handle_userfault ] && n=$((n + 1))
	done
	echo "$n"
}
for _ in $(seq 600); do
	[ "$(blocked)" -ge 4 ] && break
	sleep 0.05
done
[ "$(blocked)" -ge 4 ] ||
	fail "the target's 4 checking threads are not all waiting in userfaultfd: $(for t in "/proc/$WD/task"/*/wchan; do cat "$t"; echo; done)"
! grep -q MISMATCH "$T/WD.log" || fail "a lost page read wrong: $(head -3 "$T/WD.log")"
! grep -q '^verified' "$T/WD.out" || fail "the target finished although pages were lost"
kill -9 "$WD"

# With UFFDIO_POISON.
start_daemon dst
"$CLIENT" --control "$dst_SOCK" status --json >/dev/null
grep -q "poison yes" "$T/dst.log" || skip "kernel has no UFFDIO_POISON (6.6+): its half skipped, the fallback passed"
lose_source dst now --sigbus-ok
for _ in $(seq 600); do
	grep -q '^verified' "$T/WD.out" && break
	sleep 0.1
done
line=$(grep '^verified' "$T/WD.out") || fail "destination workload did not finish"
info "destination workload: $line"
echo "$line" | grep -q ' 0 mismatches' || fail "wrong bytes: $(cat "$T/WD.log")"
lost=$(echo "$line" | sed 's/.* \([0-9]*\) lost/\1/')
[ "$lost" -gt 0 ] || fail "no page was lost: the source died too late for the test to mean anything"
