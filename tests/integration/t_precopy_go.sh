#!/usr/bin/env bash
# export --deferred --precopy: a pre-copy whose switch is the operator's.
# The rounds run from the attach on while the process writes; once they
# converge status says ready (precopy_ready), and the rounds go on paced,
# the process still running, until go: the freeze, the pages written
# since the last round, the switchover (go answers once the destination
# took it: the process is stopped and the destination switched). The
# destination ends byte for byte equal to the process at its freeze. The
# same with --track (a holder and its writer, as a guest's RAM and QEMU):
# go stops both; with --track-unstopped the writer pauses on its own
# before go (as QEMU does) and is left alone, and one that writes after
# go fails the migration (and go with it), saying so; a destination
# attached --precopy-no-hold is not held during the rounds (as QEMU
# waiting for its device state), and one that touches its memory then
# fails the migration and is stopped. Refused, nothing changed: a second
# go. go --prepare stops the process ahead of go; a cancel after it, before
# go, leaves the process running with nothing registered, and the
# destination is told.
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
BASE=0x500000000000
HOLD=$(printf '0x%x' $((BASE + 0x10000000000)))
SIZE=64M
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec $SIZE))))
RANGE=$(printf '%x-%x' $((BASE)) $((END)))
HRANGE=$(printf '%x-%x' $((HOLD)) $((HOLD + $(numfmt --from=iec $SIZE))))
key() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
sjson() { "$CLIENT" --control "$src_SOCK" status "$1" --json >"$T/s.json" && cat "$T/s.json"; }

# wait_ready ID: until the source says the rounds converged.
wait_ready() {
	for _ in $(seq 300); do
		sjson "$1" | grep -q '"precopy_ready":true' && return
		sleep 0.1
	done
	fail "pre-copy $1 never ready: $(cat "$T/s.json")"
}

# switched WHO EXPORTED HASHED_PID HASH_START ARGS...: exports, attaches,
# waits until ready, checks the process still runs and the rounds go on,
# gives go, and checks the result byte for byte.
switched() {
	local who=$1 p=$2 hp=$3 hstart=$4 r1 r2 h_src h_dst
	shift 4
	start_workload WD dest --size "$SIZE" --threads 2 $DKIND
	ID=$("$CLIENT" --control "$src_SOCK" export "$p" --deferred --precopy --keep-source "$@") ||
		fail "$who: export failed"
	sjson "$ID" | grep -q '"deferred":true' || fail "$who: status does not say deferred: $(cat "$T/s.json")"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
		--id "$ID" --range "$RANGE" $MAP $NO_HOLD >"$T/attach.out" || fail "$who: attach: $(cat "$T/attach.out")"
	wait_ready "$ID"
	r1=$(key "$T/s.json" precopy_rounds)
	sleep 1
	[ "$(proc_state "$p")" != T ] || fail "$who: process stopped before go"
	case "$NO_HOLD:$(proc_state "$WD")" in
	--precopy-no-hold:[tT]) fail "$who: destination held despite --precopy-no-hold" ;;
	:[!tT]) fail "$who: destination not held during the pre-copy ($(proc_state "$WD"))" ;;
	esac
	sjson "$ID" >/dev/null
	r2=$(key "$T/s.json" precopy_rounds)
	[ "$r2" -gt "$r1" ] || fail "$who: no paced rounds while ready ($r1, then $r2)"
	[ "$r2" -lt $((r1 + 30)) ] || fail "$who: rounds not paced while ready ($r1, then $r2 in 1 s)"
	$PRE_GO
	"$CLIENT" --control "$src_SOCK" go "$ID" >"$T/go.out" || fail "$who: go: $(cat "$T/go.out")"
	[ "$(proc_state "$p")" = T ] || fail "$who: process not stopped when go returned"
	# ... and the destination switched over: its target may run.
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/d.json"
	! grep -q '"state":"precopy"' "$T/d.json" ||
		fail "$who: go returned before the destination switched over: $(cat "$T/d.json")"
	# That holds by the protocol, not by a race the status usually wins:
	# the destination asked for the switchover's echo, go waited for it.
	! grep -q "the destination does not say when it has switched" "$T/src.log" ||
		fail "$who: the destination did not ask for the switchover's echo"
	kill -USR1 "$WD"
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" ||
		fail "$who: wait: $(cat "$T/wait.out")"
	wait_verified WD
	SAN_WHO="wait (source)" checked "$T/src-wait.out" "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 ||
		fail "$who: source side did not complete"
	h_src=$("$MEMHASH" "$hp" "$hstart" $((hstart + $(numfmt --from=iec $SIZE))))
	h_dst=$("$MEMHASH" "$WD" $BASE "$END")
	[ "$h_src" = "$h_dst" ] || fail "$who: destination differs from the process at its freeze"
	expect_error "$who: a second go" "had its go already" \
		"$CLIENT" --control "$src_SOCK" go "$ID"
	info "$who: ready after $r1 rounds, $r2 a second later; $(cat "$T/go.out"); then equal: sha256 $h_src"
}

DKIND="" MAP="" PRE_GO="" NO_HOLD=""
start_workload WS source --size "$SIZE" --threads 2 --hot 3 --pace-us 20
switched "process" "$WS" "$WS" $((BASE)) --range "$RANGE"
kill -9 "$WS" "$WD" 2>/dev/null || true

# holder_pair: a writer WS over a memfd and its holder H (1 TiB up).
holder_pair() {
	start_holder_pair --kind memfd --size "$SIZE" --threads 2 --hot 3 --pace-us 20
}
DKIND="--kind memfd" MAP="--map $(printf '%x:%x' $((HOLD)) $((BASE)))"
holder_pair
# Named, as a guest's RAM blocks are (attach --map NAME=DST).
MAP="--map ram0=$(printf '%x' $((BASE)))"
switched "holder and tracked writer" "$H" "$H" $((HOLD)) --range "$HRANGE=ram0" --track "$WS"
MAP="--map $(printf '%x:%x' $((HOLD)) $((BASE)))"
[ "$(proc_state "$WS")" = T ] || fail "go did not stop the tracked writer"
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true

# --track-unstopped: the writer stops writing on its own before go (as
# QEMU pauses its guest at pre-switchover) and is not stopped by uffdd.
holder_pair
PRE_GO="kill -STOP $WS" NO_HOLD=--precopy-no-hold
switched "writer paused on its own, destination not held" "$H" "$H" $((HOLD)) \
	--range "$HRANGE" --track-unstopped "$WS"
PRE_GO="" NO_HOLD=""
grep -q "writes of process $WS to its memory tracked too (--track-unstopped" "$T/src.log" ||
	fail "the log does not say the writer is tracked unstopped"
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true

# ... and one that writes on after go (it never paused) fails the
# migration before its commit: the destination never runs on torn memory.
holder_pair
start_workload WD dest --size "$SIZE" --threads 2 $DKIND
ID=$("$CLIENT" --control "$src_SOCK" export "$H" --deferred --precopy --range "$HRANGE" \
	--track-unstopped "$WS") || fail "unstopped: export failed"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE" $MAP >"$T/attach.out" || fail "unstopped: attach: $(cat "$T/attach.out")"
wait_ready "$ID"
# Go answers once the destination switched over: here it fails first.
expect_error "go, the writer writing on" "wrote to the exported memory" \
	"$CLIENT" --control "$src_SOCK" go "$ID"
if "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 >"$T/wait.out" 2>&1; then
	fail "a write by the unstopped writer after go went unnoticed"
fi
grep -q "wrote to the exported memory" "$T/wait.out" ||
	fail "the failure does not name the write: $(cat "$T/wait.out")"
if "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60 >"$T/dwait.out" 2>&1; then
	fail "the destination of a torn pre-copy completed"
fi
info "a write after go: $(grep -o 'tracked process.*' "$T/wait.out" | head -n 1); destination: $(tail -n 1 "$T/dwait.out")"
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true

# A destination not held that touches its memory before the switchover
# fails the migration, and is stopped.
holder_pair
start_workload WD dest --size "$SIZE" --threads 2 $DKIND
ID=$("$CLIENT" --control "$src_SOCK" export "$H" --deferred --precopy --range "$HRANGE" \
	--track "$WS") || fail "no hold, touched: export failed"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE" $MAP --precopy-no-hold >"$T/attach.out" ||
	fail "no hold, touched: attach: $(cat "$T/attach.out")"
wait_ready "$ID"
kill -USR1 "$WD"
if "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60 >"$T/dwait.out" 2>&1; then
	fail "a destination that touched its memory during the pre-copy completed"
fi
grep -q "touched its memory at 0x[0-9a-f]* during the pre-copy" "$T/dwait.out" ||
	fail "the failure does not say the target touched its memory: $(cat "$T/dwait.out")"
for _ in $(seq 50); do
	[ "$(proc_state "$WD")" = T ] && break
	sleep 0.1
done
[ "$(proc_state "$WD")" = T ] || fail "the destination that touched its memory was not stopped"
[ "$(proc_state "$WS")" != T ] && [ "$(proc_state "$H")" != T ] ||
	fail "the source processes did not run on after the failed pre-copy"
info "no hold, touched: $(grep -o 'process [0-9]* touched.*' "$T/dwait.out" | head -n 1)"
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true

info "refusals, and a cancel before go"
start_workload WS source --size 8M --threads 1 --hot 3 --pace-us 50
start_workload WD dest --size 8M --threads 1
R8=$(printf '%x-%x' $((BASE)) $((BASE + 8 * 1024 * 1024)))
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --deferred --precopy --range "$R8")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$R8" >/dev/null || fail "attach for the cancel failed"
# A prepare stops the process now; the rounds go on (nothing more to
# find), and the cancel lets it run again.
"$CLIENT" --control "$src_SOCK" go --prepare "$ID" >"$T/prep.out" ||
	fail "go --prepare on a pre-copy: $(cat "$T/prep.out")"
[ "$(proc_state "$WS")" = T ] || fail "go --prepare left the pre-copied process running"
wait_ready "$ID"
"$CLIENT" --control "$src_SOCK" cancel "$ID" >/dev/null || fail "cancel before go failed"
if "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 30 >"$T/wait.out" 2>&1; then
	fail "the destination of a cancelled pre-copy completed"
fi
grep -q "cancelled before go" "$T/wait.out" || fail "the destination was not told of the cancel: $(cat "$T/wait.out")"
[ "$(proc_state "$WS")" != T ] || fail "cancel left the process stopped"
for _ in $(seq 50); do
	grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$WS/smaps" || break
	sleep 0.1
done
grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$WS/smaps" &&
	fail "cancel left the process with a userfaultfd registered"
info "cancelled before go: the process runs, nothing registered; the destination: $(head -n 1 "$T/wait.out")"
kill -9 "$WS" "$WD" 2>/dev/null || true
stop_daemons
