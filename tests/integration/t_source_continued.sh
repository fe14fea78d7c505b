#!/usr/bin/env bash
# Someone else sends SIGCONT to the frozen source process: it runs and
# writes pages that were classified, or already sent, while frozen. The
# migration must not end as if nothing happened: the source fails it,
# saying why, the destination learns it, and the source process (which now
# holds the newest bytes) is not killed. Once during a migration, once
# between export and attach, once continued and stopped again at once
# (SIGCONT then SIGSTOP: the threads ran, though they are all stopped at
# every later look; the count of their context switches tells), once so
# within 100 ms of the export, with writes between (the writes are found
# where the kernel tracks them, the switches otherwise), and once while the
# source daemon was down (the restarted daemon does not take the export
# up).
. "$SRC/tests/lib.sh"
need_root
start_daemon src --bulk-rate 4M
start_daemon dst
RANGE=500000000000-500002000000
state() { "$CLIENT" --control "$1" status "$2" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }
reason() { "$CLIENT" --control "$1" status "$2" --json | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p'; }
wait_state() {
	for _ in $(seq 100); do
		[ "$(state "$1" "$2")" = "$3" ] && return
		sleep 0.1
	done
	fail "$4: state $(state "$1" "$2"), not $3, 10 s after the SIGCONT"
}

# migrate_for_a_while: an export and attach, running for over a ping.
migrate_for_a_while() {
	start_workload WS source --size 32M --threads 2
	start_workload WD dest --size 32M --touch 0
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
		--id "$ID" --range "$RANGE" >/dev/null
	sleep 1.5
	[ "$(state "$dst_SOCK" "$ID")" = running ] || fail "migration not running after 1.5 s"
}

info "continued during the migration"
migrate_for_a_while
kill -CONT "$WS"
wait_state "$src_SOCK" "$ID" failed "source"
reason "$src_SOCK" "$ID" | grep -q "continued" || fail "source reason: $(reason "$src_SOCK" "$ID")"
info "source: $(reason "$src_SOCK" "$ID")"
wait_state "$dst_SOCK" "$ID" failed "destination"
reason "$dst_SOCK" "$ID" | grep -q "continued" || fail "destination reason: $(reason "$dst_SOCK" "$ID")"
info "destination: $(reason "$dst_SOCK" "$ID")"
kill -0 "$WS" 2>/dev/null && [ "$(proc_state "$WS")" != Z ] || fail "the continued source process was killed"
kill -9 "$WS" "$WD"

info "continued between export and attach"
start_workload WS source --size 32M --threads 2
start_workload WD dest --size 32M --touch 0
h_dst=$(mem_state "$WD" 0x500000000000 0x500002000000)
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
kill -CONT "$WS"
wait_state "$src_SOCK" "$ID" failed "export"
if checked "$T/out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE"; then
	fail "attach to a continued export succeeded: $(cat "$T/out")"
fi
grep -q "continued" "$T/out" || fail "attach refusal does not say why: $(cat "$T/out")"
info "attach refused: $(cat "$T/out")"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "refused attach left a userfaultfd in the target"
[ "$(mem_state "$WD" 0x500000000000 0x500002000000)" = "$h_dst" ] || fail "refused attach changed the target"
kill -0 "$src_PID" && kill -0 "$dst_PID" || fail "a daemon died"
kill -9 "$WS" "$WD" 2>/dev/null || true


info "continued and stopped again at once, during the migration"
migrate_for_a_while
kill -CONT "$WS"
kill -STOP "$WS"
wait_state "$src_SOCK" "$ID" failed "source, CONT and STOP"
reason "$src_SOCK" "$ID" | grep -q "continued" || fail "source reason: $(reason "$src_SOCK" "$ID")"
wait_state "$dst_SOCK" "$ID" failed "destination, CONT and STOP"
info "source: $(reason "$src_SOCK" "$ID")"
kill -0 "$WS" 2>/dev/null && [ "$(proc_state "$WS")" != Z ] || fail "the continued source process was killed"
kill -9 "$WS" "$WD"

# run_100ms SRC_DAEMON: export, attach, and 100 ms after the export the
# source runs for 30 ms (writing all the while) and is stopped again. The
# migration fails on both sides; the source's reason is printed.
run_100ms() {
	local s=$1 ssock sport t0 left
	ssock=$(eval echo "\$${s}_SOCK")
	sport=$(eval echo "\$${s}_PORT")
	start_workload WS source --size 32M --threads 2
	start_workload WD dest --size 32M --touch 0
	ID=$("$CLIENT" --control "$ssock" export "$WS" --range "$RANGE")
	t0=$(date +%s%N)
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$sport" \
		--id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 &
	left=$((100000000 - ($(date +%s%N) - t0)))
	[ "$left" -gt 0 ] && sleep "$(printf '0.%09d' "$left")"
	kill -CONT "$WS"
	sleep 0.03
	kill -STOP "$WS"
	wait $! || true
	wait_state "$ssock" "$ID" failed "source, 100 ms"
	if grep -q '^attached' "$T/attach.out"; then
		wait_state "$dst_SOCK" "$ID" failed "destination, 100 ms"
		DREASON=$(reason "$dst_SOCK" "$ID")
	else
		DREASON=$(cat "$T/attach.out")
	fi
	echo "$DREASON" | grep -q "continued" || fail "destination does not say why: $DREASON"
	SREASON=$(reason "$ssock" "$ID")
	info "source: $SREASON"
	info "destination: $DREASON"
	kill -9 "$WS" "$WD"
}

info "continued and stopped again 100 ms after the export, writes tracked"
# Write tracking needs UFFD_FEATURE_WP_ASYNC (bit 15) with WP_UNPOPULATED
# (13) and WP_HUGETLBFS_SHMEM (12), and PAGEMAP_SCAN: 6.7 and later.
run_100ms src
feat=$(sed -n 's/.*uffd features 0x\([0-9a-f]*\).*/\1/p' "$T/src.log" | head -n1)
if [ -n "$feat" ] && [ $((0x$feat & 0xb000)) = $((0xb000)) ] &&
	grep -q 'pagemap_scan yes' "$T/src.log"; then
	echo "$SREASON" | grep -q "wrote to its memory at 0x" ||
		fail "tracked writes not named: $SREASON"
else
	echo "$SREASON" | grep -q "was continued" || fail "source reason: $SREASON"
	skip_part "tracked writes: this kernel does not track writes (found by context switches)"
fi
info "continued and stopped again 100 ms after the export, writes not tracked (as on 6.1-6.6)"
UFFDD_TEST_NO_WP_TRACKING=1
export UFFDD_TEST_NO_WP_TRACKING
start_daemon src2 --bulk-rate 4M
unset UFFDD_TEST_NO_WP_TRACKING
run_100ms src2
echo "$SREASON" | grep -q "was continued" || fail "source reason: $SREASON"

info "continued and stopped again while the source daemon was down"
migrate_for_a_while
kill_daemon src
kill -CONT "$WS"
kill -STOP "$WS"
restart_daemon src
grep -q "source process $WS ran while no daemon watched it.*export ${ID:0:8}.* not taken up; the process is left stopped" "$T/src.log" ||
	fail "the restarted source took the export up: $(tail -n 5 "$T/src.log")"
SAN_WHO="status after the restart" checked "$T/status.out" "$CLIENT" --control "$src_SOCK" status "$ID" && fail "the export is still listed after the restart"
[ "$(proc_state "$WS")" = T ] || fail "source process not left stopped: $(proc_state "$WS")"
info "restart: $(grep 'ran while no daemon' "$T/src.log")"
kill -9 "$WS" "$WD"
