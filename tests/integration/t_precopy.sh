#!/usr/bin/env bash
# export --precopy: a process that keeps writing to a hot set (3% of 256
# MiB) and owns a cold rest is migrated while it runs; the destination ends
# byte for byte equal to the source at its freeze (kept with --keep-source,
# hashed by memhash). The same migration without --precopy runs beside it,
# and both print their post-copy demand faults and freeze time. Then the
# refusal: a daemon whose kernel cannot track writes (UFFDD_TEST_NO_WP_TRACKING)
# refuses --precopy naming the feature, and leaves the process running.
# The pre-copy's attach asks --hold-bulk: its rounds ignore the hold, but
# its completion waits for the release (the target's start keeps the CPUs:
# every page is in at the switchover).
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
SIZE=${PRECOPY_SIZE:-256M} # the size of the main comparison
BASE=0x500000000000
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec $SIZE))))
RANGE=$(printf '%x-%x' $((BASE)) $((END)))
key() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# one_migration precopy|postcopy [SIZE [WORKLOAD ARGS]]: a migration of a
# steadily writing process, checked byte for byte; sets FAULTS, FREEZE_MS
# and ROUNDS.
one_migration() {
	local mode=$1 size=${2:-$SIZE} wargs=${3:-} exportargs=(--keep-source) attachargs=()
	local t0 t1 h_src h_dst
	END=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$size"))))
	RANGE=$(printf '%x-%x' $((BASE)) $((END)))
	[ "$mode" = precopy ] && exportargs+=(--precopy)
	# A bulk lane held until the target runs would never carry a
	# pre-copy's rounds: both daemons drop the hold for one, and only
	# the completion waits for the release (held_completion).
	[ "$mode" = precopy ] && attachargs+=(--hold-bulk)
	# shellcheck disable=SC2086
	start_workload WS source --size "$size" --threads 2 --hot 3 --pace-us 20 $wargs
	# shellcheck disable=SC2086
	start_workload WD dest --size "$size" --threads 4 --prefault $wargs
	sleep 0.2
	t0=$(now_ms)
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE" "${exportargs[@]}") ||
		fail "$mode: export failed"
	if [ "$mode" = precopy ]; then
		[ "$(proc_state "$WS")" != T ] || fail "precopy: source stopped at the export"
	else
		[ "$(proc_state "$WS")" = T ] || fail "postcopy: source not stopped at the export"
	fi
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
		--id "$ID" --range "$RANGE" "${attachargs[@]}" >"$T/attach.out" ||
		fail "$mode: attach: $(cat "$T/attach.out")"
	t1=$(now_ms)
	kill -USR1 "$WD"
	[ "$mode" = precopy ] && held_completion
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" ||
		fail "$mode: wait: $(cat "$T/wait.out")"
	wait_verified WD
	SAN_WHO="wait (source)" checked "$T/src-wait.out" "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 ||
		fail "$mode: source side did not complete: $("$CLIENT" --control "$src_SOCK" status "$ID")"
	[ "$(proc_state "$WS")" = T ] || fail "$mode: source not left stopped"
	h_src=$("$MEMHASH" "$WS" $BASE "$END")
	h_dst=$("$MEMHASH" "$WD" $BASE "$END")
	[ "$h_src" = "$h_dst" ] || fail "$mode: destination differs from the source at its freeze"
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/$mode.dst.json"
	"$CLIENT" --control "$src_SOCK" status "$ID" --json >"$T/$mode.src.json"
	FAULTS=$(key "$T/$mode.dst.json" demand_faults)
	ROUNDS=$(key "$T/$mode.dst.json" precopy_rounds)
	if [ "$mode" = precopy ]; then
		FREEZE_MS=$(key "$T/$mode.dst.json" downtime_ms)
	else
		# Frozen at the export; the target runs once attach returns.
		FREEZE_MS=$((t1 - t0))
	fi
	info "$mode: sha256 $h_src equal on both sides"
	kill -9 "$WS" "$WD" 2>/dev/null || true
}

# held_completion: a pre-copy attached with --hold-bulk switches over with
# every page in, and completes only once released.
held_completion() {
	local st="" i
	for i in $(seq 600); do
		"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/held.json"
		st=$(key "$T/held.json" state | tr -d '"')
		[ "$st" != precopy ] && break
		sleep 0.05
	done
	[ "$st" = running ] || fail "precopy: state $st after the rounds, not running: $(cat "$T/held.json")"
	sleep 0.5
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/held.json"
	[ "$(key "$T/held.json" state)" = '"running"' ] ||
		fail "precopy: completed before its release: $(cat "$T/held.json")"
	[ "$(key "$T/held.json" pages_present)" = "$(key "$T/held.json" pages_total)" ] ||
		fail "precopy: not every page in after the switchover: $(cat "$T/held.json")"
	"$CLIENT" --control "$dst_SOCK" release "$ID" >"$T/rel.out" 2>&1 ||
		fail "precopy: release: $(cat "$T/rel.out")"
	grep -q "the target runs (released): the migration may complete" "$T/dst.log" ||
		fail "precopy: the release is not in the log"
	info "precopy: every page in at the switchover, completed only after the release"
}

one_migration precopy
P_FAULTS=$FAULTS P_FREEZE=$FREEZE_MS P_ROUNDS=$ROUNDS
[ "$P_ROUNDS" -ge 2 ] || fail "precopy: $P_ROUNDS rounds"
for side in src dst; do
	grep -q '"precopy_round_bytes":\[[0-9]' "$T/precopy.$side.json" ||
		fail "precopy: no bytes per round in the $side status: $(cat "$T/precopy.$side.json")"
done
"$CLIENT" --control "$src_SOCK" status "$ID" | grep -E 'pre-copy|freeze'
info "source: $(grep -o 'frozen after.*' "$T/src.log" | tail -n 1)"
one_migration postcopy
info "precopy:  $P_FAULTS demand faults after the switchover, freeze $P_FREEZE ms (daemon), $P_ROUNDS rounds"
info "postcopy: $FAULTS demand faults, freeze $FREEZE_MS ms (export to attach returned)"
[ "$P_FAULTS" -le "$FAULTS" ] || fail "precopy took more demand faults ($P_FAULTS) than post-copy ($FAULTS)"

for kind in memfd shared hugetlb; do
	if [ $kind = hugetlb ] && ! reserve_huge_pages 40; then
		skip_part "kind hugetlb: no 2 MiB huge pages to be had"
		continue
	fi
	one_migration precopy 32M "--kind $kind --zero-every 16"
	info "kind $kind: pre-copied in $ROUNDS rounds, $FAULTS demand faults, freeze $FREEZE_MS ms"
done

info "pages the source discards (MADV_DONTNEED) during pre-copy"
start_workload WS source --size 32M --threads 2 --hot 3 --pace-us 50 --discard-every 8
start_workload WD dest --size 32M --touch 0
R32=$(printf '%x-%x' $((BASE)) $((BASE + 32 * 1024 * 1024)))
E32=$((BASE + 32 * 1024 * 1024))
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$R32" --precopy --keep-source)
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$R32" >/dev/null || fail "discards: attach failed"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" ||
	fail "discards: wait: $(cat "$T/wait.out")"
SAN_WHO="wait (source)" checked "$T/src-wait.out" "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 ||
	fail "discards: source side did not complete"
[ "$("$MEMHASH" "$WS" $BASE $E32)" = "$("$MEMHASH" "$WD" $BASE $E32)" ] ||
	fail "discards: destination differs from the source at its freeze"
info "discards: destination equal to the source at its freeze"
kill -9 "$WS" "$WD"

info "source daemon killed during pre-copy"
# pause-deadline: how long src2 waits for a destination that went away.
start_daemon src2 --bulk-rate 8M --pause-deadline 3
start_workload WS source --size 32M --threads 1 --hot 3 --pace-us 100
start_workload WD dest --size 32M --threads 2 --prefault
ID=$("$CLIENT" --control "$src2_SOCK" export "$WS" --range "$R32" --precopy)
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src2_PORT" \
	--id "$ID" --range "$R32" >/dev/null || fail "attach to a pre-copy failed"
dstate() { "$CLIENT" --control "$dst_SOCK" status "$ID" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }
for _ in $(seq 200); do
	st=$(dstate)
	[ "$st" = precopy ] && break
	sleep 0.05
done
[ "$st" = precopy ] || fail "destination state $st during pre-copy, not precopy"
[ "$(proc_state "$WD")" = t ] || [ "$(proc_state "$WD")" = T ] ||
	fail "destination target runs before the switchover (state $(proc_state "$WD"))"
kill_daemon src2
h1=$("$MEMHASH" "$WS" $BASE $E32)
sleep 0.3
h2=$("$MEMHASH" "$WS" $BASE $E32)
[ "$(proc_state "$WS")" != T ] && [ "$h1" != "$h2" ] ||
	fail "source process not running after its daemon died during pre-copy"
ls -l "/proc/$WS/fd" | grep -q userfaultfd && fail "source process holds a userfaultfd"
grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$WS/smaps" &&
	fail "source process still has ranges registered with a userfaultfd"
restart_daemon src2
for _ in $(seq 100); do
	st=$("$CLIENT" --control "$dst_SOCK" status "$ID" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')
	[ "$st" = failed ] && break
	sleep 0.1
done
[ "$st" = failed ] || fail "destination state $st, not failed, after the source forgot the pre-copy"
[ "$(proc_state "$WD")" = T ] || fail "destination target not left stopped (state $(proc_state "$WD"))"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "stopped target still holds a userfaultfd"
info "destination: $("$CLIENT" --control "$dst_SOCK" status "$ID" --json | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p')"
info "source process runs on, unregistered; destination target left stopped"
kill -9 "$WS" "$WD"

info "destination daemon killed during pre-copy"
start_daemon dst2
start_workload WS source --size 32M --threads 1 --hot 3 --pace-us 100
start_workload WD dest --size 32M --threads 2 --prefault
ID=$("$CLIENT" --control "$src2_SOCK" export "$WS" --range "$R32" --precopy)
"$CLIENT" --control "$dst2_SOCK" attach "$WD" --from "127.0.0.1:$src2_PORT" \
	--id "$ID" --range "$R32" >/dev/null || fail "attach to a pre-copy failed"
sleep 1
kill_daemon dst2
for _ in $(seq 50); do
	kill -0 "$WD" 2>/dev/null && [ "$(proc_state "$WD")" != Z ] || break
	sleep 0.1
done
kill -0 "$WD" 2>/dev/null && [ "$(proc_state "$WD")" != Z ] &&
	fail "destination target outlived its daemon during pre-copy (state $(proc_state "$WD"))"
for _ in $(seq 150); do
	st=$("$CLIENT" --control "$src2_SOCK" status "$ID" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')
	[ "$st" = failed ] && break
	sleep 0.1
done
[ "$st" = failed ] || fail "source state $st, not failed, 15 s after the destination died (pause-deadline 3)"
h1=$("$MEMHASH" "$WS" $BASE $E32)
sleep 0.3
h2=$("$MEMHASH" "$WS" $BASE $E32)
[ "$(proc_state "$WS")" != T ] && [ "$h1" != "$h2" ] ||
	fail "source process not running after its destination died during pre-copy"
grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$WS/smaps" &&
	fail "source process still has ranges registered with a userfaultfd"
info "source: $("$CLIENT" --control "$src2_SOCK" status "$ID" --json | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p')"
info "target killed with its daemon; source process runs on, unregistered"
kill -9 "$WS"

info "refused where writes cannot be tracked (as before 6.7)"
UFFDD_TEST_NO_WP_TRACKING=1
export UFFDD_TEST_NO_WP_TRACKING
start_daemon src_old
unset UFFDD_TEST_NO_WP_TRACKING
start_workload WS source --size 32M --threads 1 --hot 3 --pace-us 100
R32=$(printf '%x-%x' $((BASE)) $((BASE + 32 * 1024 * 1024)))
if checked "$T/refused.out" "$CLIENT" --control "$src_old_SOCK" export "$WS" --range "$R32" --precopy; then
	fail "--precopy accepted without write tracking: $(cat "$T/refused.out")"
fi
grep -q 'UFFD_FEATURE_WP_ASYNC' "$T/refused.out" && grep -q 'PAGEMAP_SCAN' "$T/refused.out" ||
	fail "refusal does not name the kernel feature: $(cat "$T/refused.out")"
info "refused: $(cat "$T/refused.out")"
h1=$("$MEMHASH" "$WS" $BASE $((BASE + 32 * 1024 * 1024)))
sleep 0.3
h2=$("$MEMHASH" "$WS" $BASE $((BASE + 32 * 1024 * 1024)))
[ "$(proc_state "$WS")" != T ] && [ "$h1" != "$h2" ] || fail "refused export left the process stopped"
ls -l "/proc/$WS/fd" | grep -q userfaultfd && fail "refused export left a userfaultfd in the process"
"$CLIENT" --control "$src_old_SOCK" status --json | grep -q '"id"' &&
	fail "refused export is listed: $("$CLIENT" --control "$src_old_SOCK" status)"
kill -9 "$WS"
info "process kept running, nothing registered"
