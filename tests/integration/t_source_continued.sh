#!/usr/bin/env bash
# Someone else sends SIGCONT to the frozen source process: it runs and
# writes pages that were classified, or already sent, while frozen. Nothing
# torn, ever: the destination must not end complete on those pages. Its
# target is stopped, both sides fail saying why, and the source process
# (which now holds the newest bytes) is left stopped, never killed. The
# streams run at full speed: completion waits for the source's COMMIT,
# which comes only after a check that covers every page sent, and the same
# check runs every 100 ms while they stream.
#
# Cases: continued for 50 ms while a 1 GiB stream runs (started once the
# destination holds 20-60% of it), with writes tracked and without (as on
# 6.1-6.6: context switches tell); the same between export and attach;
# continued and stopped again at once (only the context switches tell);
# continued 100 ms after the export for 30 ms; and while the source daemon
# was down (the restarted one keeps the export failed, a tombstone, and
# tells the resuming destination, which stops its target).
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
BASE=0x500000000000
json() { "$CLIENT" --control "$1" status "$2" --json 2>/dev/null; }
state() { json "$1" "$2" | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }
reason() { json "$1" "$2" | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p'; }
pct() {
	json "$1" "$2" | sed -n 's/.*"pages_total":\([0-9]*\).*"pages_present":\([0-9]*\).*/\2 \1/p' |
		awk '$2 > 0 { printf "%d", 100 * $1 / $2 }'
}
wait_state() {
	for _ in $(seq 100); do
		[ "$(state "$1" "$2")" = "$3" ] && return
		sleep 0.1
	done
	fail "$4: state $(state "$1" "$2"), not $3, 10 s after the SIGCONT"
}
ran() { grep -Eq "wrote to its memory at 0x|was continued|ran while no daemon"; }

# run_50ms: the source process runs for 50 ms, then is stopped again.
run_50ms() {
	kill -CONT "$WS"
	sleep 0.05
	kill -STOP "$WS"
}

# torn SRCSOCK LABEL: the destination's wait fails, its target is stopped,
# both sides say why, and the source process is left stopped.
torn() {
	local ssock=$1 label=$2
	if checked "$T/wait.out" "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60; then
		fail "$label: the destination completed on torn memory: $(cat "$T/wait.out")"
	fi
	wait_state "$ssock" "$ID" failed "$label: source"
	SREASON=$(reason "$ssock" "$ID")
	DREASON=$(reason "$dst_SOCK" "$ID")
	echo "$SREASON" | ran || fail "$label: source reason: $SREASON"
	echo "$DREASON" | ran || fail "$label: destination reason: $DREASON"
	echo "$DREASON" | grep -q "target $WD stopped" || fail "$label: destination reason: $DREASON"
	echo "$SREASON" | grep -q "process $WS left stopped" || fail "$label: source reason: $SREASON"
	[ "$(proc_state "$WD")" = T ] || fail "$label: destination target not stopped: $(proc_state "$WD")"
	# Its lost pages poisoned, nothing of the migration stays in it.
	if grep -q 'poison yes' "$T/dst.log" && ls -l "/proc/$WD/fd" | grep -q userfaultfd; then
		fail "$label: the stopped target still holds a userfaultfd"
	fi
	[ "$(proc_state "$WS")" = T ] || fail "$label: source process not left stopped: $(proc_state "$WS")"
	info "$label: source: $SREASON"
	info "$label: destination: $DREASON"
}

# The 1 GiB source process, made once: each case exports it again (a run
# leaves it stopped, and its export failed), into a new destination.
start_workload WS source --size 1G --threads 2

# stream_1g SRCDAEMON: a 1 GiB export and attach (the target touches
# nothing: the bulk lane moves it all); returns once the destination
# holds 20-60% of it.
stream_1g() {
	local ssock sport p=0
	ssock=$(eval echo "\$${1}_SOCK")
	sport=$(eval echo "\$${1}_PORT")
	start_workload WD dest --size 1G --touch 0
	ID=$("$CLIENT" --control "$ssock" export "$WS" --range "500000000000-500040000000")
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$sport" \
		--id "$ID" --range "500000000000-500040000000" >/dev/null
	for _ in $(seq 2000); do
		p=$(pct "$dst_SOCK" "$ID")
		[ "${p:-0}" -ge 20 ] && break
		sleep 0.005
	done
	[ "${p:-0}" -ge 20 ] && [ "$p" -le 60 ] ||
		fail "the 1 GiB stream was at ${p:-?}% when looked at, not 20-60%"
	info "1 GiB stream at $p%"
}

info "continued for 50 ms during a 1 GiB stream, writes tracked"
stream_1g src
run_50ms
torn "$src_SOCK" "1 GiB, 50 ms"
kill -9 "$WD"
# Write tracking needs UFFD_FEATURE_WP_ASYNC (bit 15) with WP_UNPOPULATED
# (13) and WP_HUGETLBFS_SHMEM (12), and PAGEMAP_SCAN: 6.7 and later.
feat=$(sed -n 's/.*uffd features 0x\([0-9a-f]*\).*/\1/p' "$T/src.log" | head -n1)
if [ -n "$feat" ] && [ $((0x$feat & 0xb000)) = $((0xb000)) ] &&
	grep -q 'pagemap_scan yes' "$T/src.log"; then
	TRACKED=1
	# A check may find the threads running before they wrote: then
	# their context switches tell.
	echo "$SREASON" | grep -Eq "wrote to its memory at 0x|was continued" ||
		fail "tracked run not named: $SREASON"
else
	TRACKED=0
	info "this kernel does not track writes: found by context switches"
fi

info "continued for 50 ms during a 1 GiB stream, writes not tracked (as on 6.1-6.6)"
UFFDD_TEST_NO_WP_TRACKING=1
export UFFDD_TEST_NO_WP_TRACKING
start_daemon src2
unset UFFDD_TEST_NO_WP_TRACKING
stream_1g src2
run_50ms
torn "$src2_SOCK" "1 GiB, 50 ms, untracked"
echo "$SREASON" | grep -q "was continued" || fail "source reason: $SREASON"
kill -9 "$WD"

info "continued for 50 ms between export and attach"
start_workload WD dest --size 1G --touch 0
h_dst=$(mem_state "$WD" 0x500000000000 0x500001000000)
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "500000000000-500040000000")
run_50ms
# The check runs every 100 ms: the attach may come before it or after.
if checked "$T/out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "500000000000-500040000000"; then
	torn "$src_SOCK" "between export and attach, attached"
else
	ran <"$T/out" || fail "attach refusal does not say why: $(cat "$T/out")"
	grep -q "left stopped" "$T/out" || fail "attach refusal: $(cat "$T/out")"
	info "attach refused: $(cat "$T/out")"
	ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "refused attach left a userfaultfd in the target"
	[ "$(mem_state "$WD" 0x500000000000 0x500001000000)" = "$h_dst" ] ||
		fail "refused attach changed the target"
	[ "$(state "$src_SOCK" "$ID")" = failed ] || fail "source: $(state "$src_SOCK" "$ID")"
	[ "$(proc_state "$WS")" = T ] || fail "source process not left stopped: $(proc_state "$WS")"
	info "source: $(reason "$src_SOCK" "$ID")"
fi
kill -0 "$src_PID" && kill -0 "$dst_PID" || fail "a daemon died"
kill -9 "$WD"

info "continued and stopped again at once, during the stream"
stream_1g src
kill -CONT "$WS"
kill -STOP "$WS"
torn "$src_SOCK" "CONT and STOP"
kill -9 "$WD"

# run_100ms SRC_DAEMON: export, attach, and 100 ms after the export the
# source runs for 30 ms (writing all the while) and is stopped again.
run_100ms() {
	local s=$1 ssock sport t0 left WS
	ssock=$(eval echo "\$${s}_SOCK")
	sport=$(eval echo "\$${s}_PORT")
	start_workload WS source --size 32M --threads 2
	start_workload WD dest --size 32M --touch 0
	ID=$("$CLIENT" --control "$ssock" export "$WS" --range 500000000000-500002000000)
	t0=$(date +%s%N)
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$sport" \
		--id "$ID" --range 500000000000-500002000000 >"$T/attach.out" 2>&1 &
	left=$((100000000 - ($(date +%s%N) - t0)))
	[ "$left" -gt 0 ] && sleep "$(printf '0.%09d' "$left")"
	kill -CONT "$WS"
	sleep 0.03
	kill -STOP "$WS"
	wait $! || true
	if grep -q '^attached' "$T/attach.out"; then
		torn "$ssock" "100 ms after the export"
	else
		wait_state "$ssock" "$ID" failed "source, 100 ms"
		SREASON=$(reason "$ssock" "$ID")
		ran <"$T/attach.out" || fail "attach refusal: $(cat "$T/attach.out")"
		info "attach refused: $(cat "$T/attach.out")"
	fi
	[ "$(state "$dst_SOCK" "$ID")" != complete ] || fail "the destination completed"
	kill -9 "$WS" "$WD"
}

info "continued and stopped again 100 ms after the export, writes tracked"
run_100ms src
if [ "$TRACKED" = 1 ]; then
	echo "$SREASON" | grep -q "wrote to its memory at 0x" ||
		fail "tracked writes not named: $SREASON"
else
	skip_part "tracked writes: this kernel does not track writes (found by context switches)"
fi
info "continued and stopped again 100 ms after the export, writes not tracked"
run_100ms src2
echo "$SREASON" | grep -q "was continued" || fail "source reason: $SREASON"

info "continued and stopped again while the source daemon was down"
stream_1g src
kill_daemon src
kill -CONT "$WS"
kill -STOP "$WS"
restart_daemon src
grep -q "source process $WS ran while no daemon watched it.*export ${ID:0:8}.* not taken up; the process is left stopped" "$T/src.log" ||
	fail "the restarted source took the export up: $(tail -n 5 "$T/src.log")"
torn "$src_SOCK" "restart"
echo "$SREASON" | grep -q "ran while no daemon watched it" || fail "restart: source reason: $SREASON"
# Told: the tombstone goes.
ls "$(state_dir src)" | grep -q "^$ID" && fail "the tombstone stayed after the destination was told"
info "restart: $(grep 'ran while no daemon' "$T/src.log" | head -n 1)"
kill -9 "$WS" "$WD"

# A pre-copy of hugetlb memory (seed 2027 round 189 of the chaos harness):
# the source is continued after its freeze, the last round sent, while
# its COMMIT is held back (UFFDD_TEST_COMMIT_DELAY_MS). The check before
# the COMMIT must see the run; where writes are tracked, by the writes
# themselves: the scan covers hugetlb ranges too.
info "a pre-copy of hugetlb continued between its freeze and its COMMIT"
if reserve_huge_pages 20; then
	UFFDD_TEST_COMMIT_DELAY_MS=1500
	export UFFDD_TEST_COMMIT_DELAY_MS
	start_daemon src3
	unset UFFDD_TEST_COMMIT_DELAY_MS
	start_workload WS source --size 16M --threads 2 --kind hugetlb
	start_workload WD dest --size 16M --touch 0 --kind hugetlb
	ID=$("$CLIENT" --control "$src3_SOCK" export "$WS" --range 500000000000-500001000000 \
		--precopy --keep-source)
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src3_PORT" \
		--id "$ID" --range 500000000000-500001000000 >/dev/null
	for _ in $(seq 600); do
		grep -q "COMMIT in 1500 ms" "$T/src3.log" && break
		sleep 0.02
	done
	grep -q "COMMIT in 1500 ms" "$T/src3.log" || fail "hugetlb: no COMMIT held back: $(tail -n 5 "$T/src3.log")"
	[ "$(proc_state "$WS")" = T ] || fail "hugetlb: the source is not frozen: $(proc_state "$WS")"
	run_50ms
	torn "$src3_SOCK" "hugetlb pre-copy"
	if [ "$TRACKED" = 1 ]; then
		echo "$SREASON" | grep -q "wrote to its memory at 0x" ||
			fail "hugetlb: tracked writes not named: $SREASON"
	fi
	kill -9 "$WS" "$WD"
else
	skip_part "hugetlb pre-copy: no 2 MiB huge pages to be had"
fi
