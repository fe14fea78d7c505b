#!/usr/bin/env bash
# Issue 6 benchmarks: uffdd against floors measured in the same run.
#
#   tests/bench/run.sh BUILDDIR        (or: make bench, in the build directory)
#
# The machine is shared and noisy (docs/benchmarks.md): every round runs each
# floor next to the uffdd case it is compared with, rounds alternate, the
# first round is dropped (fresh memory is slow right after idle), and the
# table shows medians of the remaining rounds; ratios are medians of the
# per-round ratios. Below it, the best rounds: each side's least figure
# and their ratio. Both fault latency cases run again in the two-host
# placement (source daemon on CPU 1, destination daemon and target on
# CPU 0). BENCH_ROUNDS (default 7) sets the number of rounds,
# BENCH_FAULTS (2000) the faults timed per latency case, BENCH_SIZE (1G)
# the bulk size, BENCH_IDLE_ONLY=1 runs the idle fault case alone,
# BENCH_LATENCY_ONLY=1 the idle and the during-bulk fault cases alone,
# BENCH_DST_ARGS adds arguments to the plaintext destination daemons and
# BENCH_ARGS to every daemon (A/B runs of a daemon option, e.g.
# BENCH_ARGS="--poll-us 0"), BENCH_CPU_ONLY=1 the bulk floor, the
# plaintext and TLS bulk migrations and the cipher alone (the CPU s/GiB
# rows),
# BENCH_SCAN_ONLY=1 the scanning target's pairs alone (every page read in
# order during the migration, against nothing touched; unpinned, and in
# the two-host placement),
# BENCH_NICE=N runs the daemons and floors at nice N instead of the
# unit's Nice=, BENCH_BUSY_ONLY=1 the busy destination's pair
# alone (the demo's workload against nothing touched, TLS). The idle fault case runs twice a round: once
# with every process of it (the floor's three; the two daemons and the
# workloads of the uffdd case) on one CPU, BENCH_PIN (default 1), floor
# and uffdd alike, and once unpinned. On one CPU, placement across vCPUs
# (a wakeup on the other vCPU costs 20-70 us here) stops deciding the
# figure and what is left is the cost of the code path, so that row
# carries the target; unpinned, the floor itself is 8 or 75 us by where
# the scheduler puts its processes. Raw figures of every round go to
# BENCH_OUT (default BUILDDIR/bench-results.txt). Benchmarks print
# numbers; they never fail.
BUILDDIR=$(cd "${1:?usage: run.sh BUILDDIR}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export BUILDDIR SRC
. "$SRC/tests/lib.sh"
need_root

ROUNDS=${BENCH_ROUNDS:-7}
NFAULT=${BENCH_FAULTS:-2000}
BIG=${BENCH_SIZE:-1G}
OUT=${BENCH_OUT:-$B/bench-results.txt}
IDLE_SIZE=64M
BASE=0x500000000000
FFLOOR=$B/tests/bench/bench_fault_floor
BFLOOR=$B/tests/bench/bench_bulk_floor
CFLOOR=$B/tests/bench/bench_cipher
for p in "$FFLOOR" "$BFLOOR" "$CFLOOR"; do
	[ -x "$p" ] || fail "$p missing: run 'make bench' (builds it)"
done
: >"$OUT"


json_field() { sed -n "s/.*\"$2\":\\([0-9.e+-]*\\).*/\\1/p" "$1"; }

# Seconds the threads of a daemon have so far waited on a run queue,
# runnable but not running (schedstat's second field, summed).
rundelay_s() {
	local p
	for p in $(procs_of "$1"); do
		cat /proc/"$p"/task/*/schedstat 2>/dev/null
	done |
		awk '{d += $2} END {printf "%.3f", d / 1e9}'
}

# One migration of SIZE through daemons src and DST, the destination
# touching TOUCH random pages one at a time (0: none, the bulk lane alone;
# "demo": the demo's workload, 8 threads reading and checking every page
# at full speed, tests/demo.sh). Sets M_SECS (attach to fully resident),
# M_P50, M_P99, M_FAULTS, M_SCPU and M_DCPU (CPU seconds of each daemon
# during the migration), M_SWAIT and M_DWAIT (seconds each daemon's
# threads waited for a CPU meanwhile) and, from the destination's status,
# M_BLOCK (blocktime, ms, summed over threads) and M_DP99 (demand p99, us).
migrate_once() {
	local size=$1 dst=$2 touch=$3 src=${4:-src} end range id sc0 dc0 sock pid
	local s_sock s_port s_pid sw0 dw0 wargs=(--touch "$touch")
	s_sock=$(eval echo "\$${src}_SOCK")
	s_port=$(eval echo "\$${src}_PORT")
	s_pid=$(eval echo "\$${src}_PID")
	sock=${dst}_SOCK
	pid=${dst}_PID
	end=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$size"))))
	range=$(printf '%x-%x' $((BASE)) $((end)))
	start_workload WS source --size "$size" --threads 1 --untouched-every 0
	[ "$touch" = demo ] && wargs=(--threads 8 --untouched-every 0)
	start_workload WD dest --size "$size" "${wargs[@]}"
	if [ -n "$PLACE_S" ]; then
		pin_procs "$PLACE_S" "$WS"
		pin_procs "$PLACE_D" "$WD"
	fi
	id=$("$CLIENT" --control "$s_sock" export "$WS" --range "$range")
	# Warm memory for the target's pages, as the bulk floor has it
	# (BENCH_WARM, bench_bulk_floor.c): touched and freed just before.
	if [ "$size" = "$BIG" ]; then
		dd if=/dev/zero of=/dev/null bs="$WARM" count=1 2>/dev/null
	fi
	sc0=$(cpu_s "$s_pid")
	dc0=$(cpu_s "${!pid}")
	sw0=$(rundelay_s "$s_pid")
	dw0=$(rundelay_s "${!pid}")
	"$CLIENT" --control "${!sock}" attach "$WD" --from "127.0.0.1:$s_port" \
		--id "$id" --range "$range" >"$T/attach.out" 2>&1 ||
		fail "attach: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	"$CLIENT" --control "${!sock}" wait "$id" --timeout 600 >"$T/wait.out" 2>&1 ||
		fail "wait: $(cat "$T/wait.out")"
	"$CLIENT" --control "$s_sock" wait "$id" --timeout 60 >/dev/null 2>&1 || true
	M_SCPU=$(echo "$(cpu_s "$s_pid") - $sc0" | bc -l)
	M_DCPU=$(echo "$(cpu_s "${!pid}") - $dc0" | bc -l)
	M_SWAIT=$(echo "$(rundelay_s "$s_pid") - $sw0" | bc -l)
	M_DWAIT=$(echo "$(rundelay_s "${!pid}") - $dw0" | bc -l)
	"$CLIENT" --control "${!sock}" status "$id" --json >"$T/status.json"
	M_SECS=$(json_field "$T/status.json" elapsed_s)
	M_BLOCK=$(json_field "$T/status.json" blocktime_ms)
	M_DP99=$(json_field "$T/status.json" latency_p99_us)
	M_DFAULTS=$(json_field "$T/status.json" demand_faults)
	M_P50=0 M_P99=0 M_FAULTS=0
	if [ "$touch" = demo ]; then
		wait_verified WD >/dev/null
	elif [ "$touch" != 0 ]; then
		for _ in $(seq 600); do
			grep -q '^touched' "$T/WD.out" && break
			sleep 0.05
		done
		read -r _ _ _ M_FAULTS _ M_P50 _ M_P99 < <(grep '^touched' "$T/WD.out") ||
			fail "toucher printed nothing: $(cat "$T/WD.log")"
	fi
	kill -9 "$WD" "$WS" 2>/dev/null || true
	wait "$WD" "$WS" 2>/dev/null || true
}

# rec NAME VALUE: one raw figure of the current round.
rec() { echo "$ROUND $1 $2" >>"$OUT"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# switch_once precopy|postcopy: one migration of BIG whose source keeps
# writing a hot set (3%) until it is frozen, and whose target's four
# threads then read every page. Sets M_FAULTS (demand faults after the
# target runs) and M_FREEZE (ms from the source's stop to the target
# running: the daemon's figure for a pre-copy; export to attach returned
# for post-copy, which freezes at the export).
switch_once() {
	local mode=$1 end range id t0 t1 args=()
	end=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$BIG"))))
	range=$(printf '%x-%x' $((BASE)) $((end)))
	[ "$mode" = precopy ] && args=(--precopy)
	start_workload WS source --size "$BIG" --threads 2 --hot 3 --pace-us 20
	start_workload WD dest --size "$BIG" --threads 4 --prefault
	sleep 0.2
	t0=$(now_ms)
	id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range" "${args[@]}") ||
		fail "$mode: export failed"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
		--id "$id" --range "$range" >"$T/attach.out" 2>&1 ||
		fail "$mode: attach: $(cat "$T/attach.out")"
	t1=$(now_ms)
	kill -USR1 "$WD"
	"$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 600 >"$T/wait.out" 2>&1 ||
		fail "$mode: wait: $(cat "$T/wait.out")"
	"$CLIENT" --control "$dst_SOCK" status "$id" --json >"$T/status.json"
	M_FAULTS=$(json_field "$T/status.json" demand_faults)
	if [ "$mode" = precopy ]; then
		M_FREEZE=$(json_field "$T/status.json" downtime_ms)
	else
		M_FREEZE=$((t1 - t0))
	fi
	kill -9 "$WD" "$WS" 2>/dev/null || true
	wait "$WD" "$WS" 2>/dev/null || true
}

# Plaintext daemons (--insecure, loopback) for every row but the TLS one,
# which has its own pair with the test PKI of tests/lib.sh.
# shellcheck disable=SC2086
start_daemon src --insecure ${BENCH_ARGS:-}
# shellcheck disable=SC2086
start_daemon dst --insecure ${BENCH_DST_ARGS:-} ${BENCH_ARGS:-}
# shellcheck disable=SC2086
start_daemon srct ${BENCH_ARGS:-}
# shellcheck disable=SC2086
start_daemon dstt ${BENCH_ARGS:-}
# The idle case: the bulk lane opens 4 s after attach, long after the
# toucher is done (see daemon/dest/lanes.c dest_open_bulk()).
export UFFDD_BENCH_BULK_DELAY_MS=4000
# shellcheck disable=SC2086
start_daemon dsti --insecure ${BENCH_DST_ARGS:-} ${BENCH_ARGS:-}
unset UFFDD_BENCH_BULK_DELAY_MS
# The idle case has its own source daemon, so that pinning it to one CPU
# leaves the bulk cases alone.
# shellcheck disable=SC2086
start_daemon srci --insecure ${BENCH_ARGS:-}
# The daemons run at the unit's nice value (Nice= in systemd/uffdd.service),
# as the service runs them, and so do the floor programs that stand for
# them; the workloads stay at 0. BENCH_NICE=N overrides (0: as a plain
# process; docs/busy-destination.md, "Scheduling").
NICE=${BENCH_NICE:-$(unit_nice)}
as_nice "$NICE" src dst srct dstt dsti srci
info "daemons and floors at nice $NICE"
# floor CMD...: a floor program, at the daemons' nice value.
floor() { nice -n "$NICE" "$@"; }
PIN=${BENCH_PIN:-$(($(nproc) > 1 ? 1 : 0))}
GIB=$(echo "$(numfmt --from=iec "$BIG") / 1073741824" | bc -l)
# Memory touched and freed right before each bulk run, floor or uffdd.
WARM=$(($(numfmt --from=iec "$BIG") * 5 / 4))
export BENCH_WARM=$WARM

# place HOW SRC DST: the CPUs of daemons SRC and DST and of the workloads
# that migrate_once starts beside them. "hosts" is the two-host placement:
# SRC and the source workload on CPU 1, DST and the target on CPU 0, as on
# two one-CPU hosts (a source and a destination never share a CPU in
# production, and on these 2 vCPUs, unpinned, they often do: docs/benchmarks.md,
# "Fault during bulk: two placements"). "one" puts them all on CPU $PIN.
# "free" gives them every CPU back.
PLACE_S='' PLACE_D=''
# pin_procs CPUS PID...: every thread of each process on CPUS.
pin_procs() {
	local c=$1 p
	shift
	for p in "$@"; do
		taskset -a -p -c "$c" "$p" >/dev/null
	done
}
place() {
	local all=0-$(($(nproc) - 1))
	case $1 in
	hosts) PLACE_S=1 PLACE_D=0 ;;
	one) PLACE_S=$PIN PLACE_D=$PIN ;;
	*) PLACE_S=$all PLACE_D=$all ;;
	esac
	pin_procs "$PLACE_S" $(procs_of "$(eval echo "\$${2}_PID")")
	pin_procs "$PLACE_D" $(procs_of "$(eval echo "\$${3}_PID")")
	[ "$1" = free ] && PLACE_S='' PLACE_D=''
	return 0
}

# floor_fault CPU [ARGS...]: the demand-fault floor on CPU (unpinned if
# CPU is empty); sets F_P50 and F_P99.
floor_fault() {
	local pre=()
	[ -n "$1" ] && pre=(taskset -c "$1")
	shift
	read -r F_P50 F_P99 < <(floor "${pre[@]}" "$FFLOOR" "$NFAULT" "$@" |
		tr '=' ' ' | awk '{print $5, $7}')
}

# busy_dest_pair: the demo's workload (8 threads checking every page of
# BIG, TLS) and the same migration with nothing touched, through the TLS
# daemons, in an order that alternates by round (issue 24, "the busy
# destination"): the target's threads keep both CPUs busy while they fault.
busy_dest_pair() {
	local order=(demo 0) t name
	[ $((ROUND % 2)) = 1 ] && order=(0 demo)
	for t in "${order[@]}"; do
		name=none
		[ "$t" = demo ] && name=demo
		migrate_once "$BIG" dstt "$t" srct
		rec "tls_${name}_s" "$M_SECS"
		rec "tls_${name}_scpu" "$M_SCPU"
		rec "tls_${name}_dcpu" "$M_DCPU"
		rec "tls_${name}_swait" "$M_SWAIT"
		rec "tls_${name}_dwait" "$M_DWAIT"
		rec "tls_${name}_block_ms" "$M_BLOCK"
		rec "tls_${name}_p99" "$M_DP99"
	done
}

# scan_pair PLACE PRE: a target that reads every page of BIG in order
# while it migrates (plaintext), against the same migration with nothing
# touched, in an order that alternates by round: a scanner should find its
# next pages streamed in, not fault on each. PLACE as place() takes it:
# "free" (unpinned: on these 2 vCPUs the two daemons and the scanner want
# three CPUs, and the daemons' wait for one is most of the gap) or "hosts"
# (the scanner beside the destination only, as on two hosts). Figures
# named PRE_*.
scan_pair() {
	local order=(scan 0) t pre=$2
	[ $((ROUND % 2)) = 1 ] && order=(0 scan)
	for t in "${order[@]}"; do
		place "$1" src dst
		migrate_once "$BIG" dst "$t"
		place free src dst
		[ "$t" = scan ] || t=none
		rec "${pre}_${t}_dcpu" "$M_DCPU"
		rec "${pre}_${t}_scpu" "$M_SCPU"
		rec "${pre}_${t}_dwait" "$M_DWAIT"
		rec "${pre}_${t}_swait" "$M_SWAIT"
		if [ "$t" = scan ]; then
			rec "${pre}_s" "$M_SECS"
			rec "${pre}_faults" "$M_FAULTS"
			rec "${pre}_requests" "$M_DFAULTS"
			rec "${pre}_p99" "$M_P99"
		else
			rec "${pre}_none_s" "$M_SECS"
		fi
	done
}

# cpu_rows: the bulk floor and the plaintext 1 GiB migration with nothing
# touched, the figures of the CPU s/GiB rows (issue 24).
cpu_rows() {
	read -r secs cpu scpu rcpu < <(floor "$BFLOOR" "$(numfmt --from=iec "$BIG")" |
		tr '=' ' ' | awk '{print $5, $9, $13, $15}')
	rec floor_bulk_s "$secs"
	rec floor_bulk_cpu "$cpu"
	rec floor_send_cpu "$scpu"
	rec floor_recv_cpu "$rcpu"
	migrate_once "$BIG" dst 0
	M_SCPU_PLAIN=$M_SCPU M_DCPU_PLAIN=$M_DCPU
	rec bulk_s "$M_SECS"
	rec src_cpu "$(echo "$M_SCPU / $GIB" | bc -l)"
	rec dst_cpu "$(echo "$M_DCPU / $GIB" | bc -l)"
	rec both_cpu "$(echo "($M_SCPU + $M_DCPU) / $GIB" | bc -l)"
}

# The TLS lanes: 1 GiB through the TLS pair.
tls_migration() {
	migrate_once "$BIG" dstt 0 srct
	rec tls_bulk_s "$M_SECS"
	rec tls_both_cpu "$(echo "($M_SCPU + $M_DCPU) / $GIB" | bc -l)"
	rec tls_src_cpu "$(echo "$M_SCPU / $GIB" | bc -l)"
	rec tls_dst_cpu "$(echo "$M_DCPU / $GIB" | bc -l)"
}

# The CPU rows of a round: the plaintext rows (cpu_rows()) and the TLS
# migration, in an order that alternates by round, then the TLS floor: the
# plaintext figure plus 1.5 times what the cipher alone costs to seal and
# open 1 GiB (bench_cipher.c), all measured in this round.
cpu_tls_rows() {
	local ccpu
	if [ $((ROUND % 2)) = 1 ]; then
		tls_migration
		cpu_rows
	else
		cpu_rows
		tls_migration
	fi
	read -r ccpu < <(floor "$CFLOOR" "$(numfmt --from=iec "$BIG")" |
		tr '=' ' ' | awk '{print $12}')
	rec cipher_cpu "$ccpu"
	rec tls_cpu_budget "$(echo "($M_SCPU_PLAIN + $M_DCPU_PLAIN) / $GIB + 1.5 * $ccpu" | bc -l)"
}

for ((ROUND = 0; ROUND < ROUNDS; ROUND++)); do
	info "round $ROUND of $ROUNDS"
	# BENCH_CPU_ONLY=1: the CPU s/GiB rows alone (quick A/B of builds).
	if [ -n "${BENCH_CPU_ONLY:-}" ]; then
		cpu_tls_rows
		tail -n 40 "$OUT" | grep "^$ROUND " | awk '{printf "   %s=%s", $2, $3} END {print ""}'
		continue
	fi
	scan_pair free scan
	scan_pair hosts scanh
	# BENCH_SCAN_ONLY=1: that pair alone (quick A/B of builds).
	if [ -n "${BENCH_SCAN_ONLY:-}" ]; then
		tail -n 40 "$OUT" | grep "^$ROUND " | awk '{printf "   %s=%s", $2, $3} END {print ""}'
		continue
	fi
	busy_dest_pair
	# BENCH_BUSY_ONLY=1: that pair alone (quick A/B of builds).
	if [ -n "${BENCH_BUSY_ONLY:-}" ]; then
		tail -n 40 "$OUT" | grep "^$ROUND " | awk '{printf "   %s=%s", $2, $3} END {print ""}'
		continue
	fi
	# Demand faults, idle, every process on CPU $PIN: the floor, the floor
	# whose server reads each page from another process and whose two
	# sides wait in epoll_wait() (what a daemon with an event loop cannot
	# avoid: a diagnosis, not the target), then uffdd with the bulk lane
	# held back.
	floor_fault "$PIN"
	rec one_floor_p50 "$F_P50"
	rec one_floor_p99 "$F_P99"
	floor_fault "$PIN" --remote --epoll
	rec one_floor_rel_p50 "$F_P50"
	place one srci dsti
	migrate_once "$IDLE_SIZE" dsti "$NFAULT" srci
	place free srci dsti
	rec one_idle_p50 "$M_P50"
	rec one_idle_p99 "$M_P99"
	# The same unpinned.
	floor_fault ""
	rec floor_fault_p50 "$F_P50"
	rec floor_fault_p99 "$F_P99"
	# The same floor whose server reads each page from another process
	# (/proc/PID/mem), as a source daemon must: it shows how much of the
	# gap that one read is (a diagnosis; the target stays the floor).
	floor_fault "" --remote
	rec floor_remote_p50 "$F_P50"
	migrate_once "$IDLE_SIZE" dsti "$NFAULT" srci
	rec idle_p50 "$M_P50"
	rec idle_p99 "$M_P99"
	rec idle_faults "$M_FAULTS"
	# BENCH_IDLE_ONLY=1: the idle fault case alone (quick A/B of builds).
	if [ -n "${BENCH_IDLE_ONLY:-}" ]; then
		tail -n 40 "$OUT" | grep "^$ROUND " | awk '{printf "   %s=%s", $2, $3} END {print ""}'
		continue
	fi
	# Bulk: floor, then uffdd with nothing touched, then uffdd while the
	# destination faults (the busy-lane latency case). BENCH_LATENCY_ONLY=1
	# skips to the last (quick A/B of the two latency rows).
	if [ -z "${BENCH_LATENCY_ONLY:-}" ]; then
		cpu_tls_rows
		# Shared memory: installing with UFFDIO_COPY against receiving into
		# the page cache and mapping with UFFDIO_CONTINUE (issue 6's zero-copy
		# path), both in the floor program, receiver CPU per GiB.
		for how in copy continue; do
			read -r secs rcpu < <(floor "$BFLOOR" "$(numfmt --from=iec "$BIG")" "shmem-$how" |
				tr '=' ' ' | awk '{print $5, $15}')
			rec "shmem_${how}_s" "$secs"
			rec "shmem_${how}_cpu" "$rcpu"
		done
		# The bulk floor once more, for its best round: this machine
		# makes it 1.5-6x slower at random (docs/benchmarks.md, "Best rounds").
		read -r secs _ < <(floor "$BFLOOR" "$(numfmt --from=iec "$BIG")" |
			tr '=' ' ' | awk '{print $5}')
		rec floor_bulk_again_s "$secs"
		# Pre-copy against pure post-copy, the same writing process.
		for mode in precopy postcopy; do
			switch_once "$mode"
			rec "${mode}_faults" "$M_FAULTS"
			rec "${mode}_freeze_ms" "$M_FREEZE"
		done
	fi
	migrate_once "$BIG" dst "$NFAULT"
	rec busy_p50 "$M_P50"
	rec busy_p99 "$M_P99"
	rec busy_faults "$M_FAULTS"
	rec busy_bulk_s "$M_SECS"
	# The same two latency cases in the two-host placement.
	if [ "$(nproc)" -ge 2 ]; then
		place hosts srci dsti
		migrate_once "$IDLE_SIZE" dsti "$NFAULT" srci
		place free srci dsti
		rec hosts_idle_p50 "$M_P50"
		rec hosts_idle_p99 "$M_P99"
		place hosts src dst
		migrate_once "$BIG" dst "$NFAULT"
		place free src dst
		rec hosts_busy_p50 "$M_P50"
		rec hosts_busy_p99 "$M_P99"
	fi
	tail -n 40 "$OUT" | grep "^$ROUND " | awk '{printf "   %s=%s", $2, $3} END {print ""}'
done

# median: the median of the numbers on standard input, or nan.
median() {
	sort -g |
		awk '{a[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# med NAME: median over rounds 1.. of a figure.
med() {
	awk -v k="$1" '$1 > 0 && $2 == k {print $3}' "$OUT" | median
}

# medratio A B: median over rounds 1.. of A/B taken within each round.
# shellcheck disable=SC2317 # called through fig
medratio() {
	awk -v a="$1" -v b="$2" '$1 > 0 && $2 == a {x[$1] = $3} $1 > 0 && $2 == b {y[$1] = $3}
		END {for (r in x) if (y[r] > 0) print x[r] / y[r]}' "$OUT" | median
}

# best NAME[,NAME2]: the least value over rounds 1.. of a figure (or of
# either of two figures of the same thing).
# shellcheck disable=SC2317 # called through fig
best() {
	awk -v k="$1" 'BEGIN {n = split(k, ks, ","); for (i = 1; i <= n; i++) want[ks[i]] = 1}
		$1 > 0 && ($2 in want) {print $3}' "$OUT" | sort -g | head -n 1 |
		awk '{v = $1} END {print (NR == 0) ? "nan" : v}'
}

# bestratio A B: best A over best B (both nan-safe).
# shellcheck disable=SC2317 # called through fig
bestratio() {
	awk -v a="$(best "$1")" -v b="$(best "$2")" \
		'BEGIN {print (a == "nan" || b == "nan" || b <= 0) ? "nan" : a / b}'
}

# row METRIC UFFDD FLOOR RATIO TARGET
row() {
	local verdict=-
	# Not measured in this run (BENCH_IDLE_ONLY, BENCH_LATENCY_ONLY): no row.
	[ "$2" = nan ] || [ "$3" = nan ] && return
	if [ "$5" != - ] && [ "$4" != n/a ]; then
		verdict=$(awk -v r="$4" -v t="$5" 'BEGIN {print (r <= t) ? "pass" : "MISS"}')
	fi
	printf '%-40s %10s %10s %7s %7s  %s\n' "$1" "$2" "$3" "$4" "$5" "$verdict"
}
fmt() { printf '%.*f' "$1" "$2"; }
# fig med|best DIGITS METRIC UFFDD FLOOR TARGET: the row of two figures
# (their medians and the median of their per-round ratios, or each side's
# best round and the ratio of the two), to DIGITS decimals.
fig() {
	row "$3" "$(fmt "$2" "$("$1" "$4")")" "$(fmt "$2" "$("$1" "$5")")" \
		"$(fmt 2 "$("${1}ratio" "$4" "$5")")" "$6"
}

echo
echo "uffdd benchmarks, $((ROUNDS - 1)) rounds after a dropped first one; $(nproc) CPUs, $(uname -r)"
echo "$NFAULT faults per latency case; bulk $BIG; one-CPU rows on CPU $PIN; raw figures in $OUT"
printf '%-40s %10s %10s %7s %7s  %s\n' metric uffdd floor ratio target result
fig med 1 "demand fault idle p50, one CPU (us)" one_idle_p50 one_floor_p50 1.25
fig med 1 "demand fault idle p99, one CPU (us)" one_idle_p99 one_floor_p99 -
fig med 1 "idle p50, one CPU (floor: read+epoll)" one_idle_p50 one_floor_rel_p50 -
fig med 1 "demand fault idle p50, unpinned (us)" idle_p50 floor_fault_p50 -
fig med 1 "demand fault idle p99, unpinned (us)" idle_p99 floor_fault_p99 -
fig med 1 "idle p50, unpinned (floor: remote read)" idle_p50 floor_remote_p50 -
fig med 1 "fault during bulk p99 (us; floor: idle)" busy_p99 idle_p99 3
fig med 1 "fault during bulk p50 (us; floor: idle)" busy_p50 idle_p50 -
fig med 1 "fault during bulk p99, two hosts (us)" hosts_busy_p99 hosts_idle_p99 3
fig med 1 "fault during bulk p50, two hosts (us)" hosts_busy_p50 hosts_idle_p50 -
fig med 3 "$BIG attach to resident (s)" bulk_s floor_bulk_s 1.3
fig med 3 "$BIG attach to resident, TLS (s)" tls_bulk_s floor_bulk_s 1.6
fig med 3 "$BIG resident, $NFAULT faults too (s)" busy_bulk_s floor_bulk_s -
# The busy destination (issue 24): the demo's 8 checking threads against
# nothing touched, TLS, same round; then what the daemons spent and waited.
fig med 3 "$BIG resident, TLS, demo v untouched (s)" tls_demo_s tls_none_s 2
fig med 3 "$BIG resident, scanning v untouched (s)" scan_s scan_none_s 1.2
fig med 0 "  scanner's reads that waited (floor: none)" scan_faults scan_faults -
fig med 0 "  demand faults, status (floor: none)" scan_requests scan_requests -
fig med 3 "  dest daemon CPU (s), scanning v untouched" scan_scan_dcpu scan_none_dcpu -
fig med 3 "  src daemon CPU (s), scanning v untouched" scan_scan_scpu scan_none_scpu -
fig med 3 "  dest daemon run-queue wait (s), the same" scan_scan_dwait scan_none_dwait -
fig med 3 "  src daemon run-queue wait (s), the same" scan_scan_swait scan_none_swait -
fig med 3 "$BIG resident, scanning v untouched, two hosts (s)" scanh_s scanh_none_s 1.2
fig med 0 "  demand faults, status (floor: none)" scanh_requests scanh_requests -
fig med 3 "  dest daemon CPU (s), scanning v untouched" scanh_scan_dcpu scanh_none_dcpu -
fig med 3 "  src daemon CPU (s), scanning v untouched" scanh_scan_scpu scanh_none_scpu -
fig med 3 "  dest daemon run-queue wait (s), the same" scanh_scan_dwait scanh_none_dwait -
fig med 3 "  dest daemon CPU (s), demo v untouched" tls_demo_dcpu tls_none_dcpu -
fig med 3 "  src daemon CPU (s), demo v untouched" tls_demo_scpu tls_none_scpu -
fig med 3 "  dest daemon run-queue wait (s)" tls_demo_dwait tls_none_dwait -
fig med 3 "  src daemon run-queue wait (s)" tls_demo_swait tls_none_swait -
fig med 3 "CPU s/GiB, source (floor: sender)" src_cpu floor_send_cpu -
fig med 3 "CPU s/GiB, destination (floor: receiver)" dst_cpu floor_recv_cpu -
fig med 3 "CPU s/GiB, both daemons (floor: both)" both_cpu floor_bulk_cpu 1.2
fig med 3 "CPU s/GiB, both, TLS (floor: plain+1.5c)" tls_both_cpu tls_cpu_budget 1
fig med 3 "  TLS source (floor: plaintext source)" tls_src_cpu src_cpu -
fig med 3 "  TLS destination (floor: plaintext dest)" tls_dst_cpu dst_cpu -
fig med 3 "CPU s/GiB, cipher AES-128-GCM seal+open" cipher_cpu cipher_cpu -
fig med 3 "shmem install CPU/GiB, CONTINUE v COPY" shmem_continue_cpu shmem_copy_cpu -
# Pre-copy: the figures against pure post-copy's; the freeze's target is
# absolute (20 ms for 1 GiB), so its verdict is on the figure itself.
fig med 0 "faults after start, --precopy v post-copy" precopy_faults postcopy_faults 0.1
fig med 1 "freeze (ms), --precopy v post-copy" precopy_freeze_ms postcopy_freeze_ms -
row "freeze (ms), --precopy (ratio: to 20 ms)" "$(fmt 1 "$(med precopy_freeze_ms)")" - \
	"$(fmt 2 "$(awk -v f="$(med precopy_freeze_ms)" 'BEGIN {print f / 20}')")" 1
# Best rounds: each side's least figure over the rounds, and their ratio.
# Where the noise of this machine only adds time, the floor's as often as
# uffdd's, a round's ratio says more of the noise than of the code
# (docs/benchmarks.md, "Best rounds"): a slow floor round reads as a pass.
echo "best rounds (each side's least figure; the bulk floor runs twice a round):"
fig best 1 "demand fault idle p50, one CPU (us)" one_idle_p50 one_floor_p50 1.25
fig best 1 "fault during bulk p99 (us; floor: idle)" busy_p99 idle_p99 3
fig best 1 "fault during bulk p99, two hosts (us)" hosts_busy_p99 hosts_idle_p99 3
FB=floor_bulk_s,floor_bulk_again_s
fig best 3 "$BIG attach to resident (s)" bulk_s "$FB" 1.3
fig best 3 "$BIG attach to resident, TLS (s)" tls_bulk_s "$FB" 1.6
fig best 3 "$BIG resident, TLS, demo v untouched (s)" tls_demo_s tls_none_s 2
fig best 3 "CPU s/GiB, both daemons (floor: both)" both_cpu floor_bulk_cpu 1.2
fig best 3 "CPU s/GiB, both, TLS (floor: plain+1.5c)" tls_both_cpu tls_cpu_budget 1
echo "(unpinned, a fault's three processes land on one vCPU or on two, the floor's as
 uffdd's, and a wakeup across vCPUs costs 20-70 us here: the unpinned idle
 rows say where the scheduler put them, the one-CPU rows what the code costs)"
echo "(idle faults timed per round: $(med idle_faults), during bulk: $(med busy_faults);"
echo " CPU: the bulk run with nothing touched; loopback TCP work is charged to
 whichever side runs it, so the per-side split moves between runs; every row
 but the TLS one runs plaintext lanes, --insecure on loopback)"
exit 0
