#!/usr/bin/env bash
# Benchmark: what the source's freeze check costs (docs/design.md, "The
# freeze check"): a PAGEMAP_SCAN of the exported ranges where writes are
# tracked, and the threads' context switches. For each case (SIZE,
# mutator THREADS, tracked or not) a source workload is exported, left
# exported for SECS seconds (the check runs every 100 ms meanwhile), then
# migrated to a destination that touches nothing; the source's log line
# at the end gives the checks made, their mean cost (wall clock, which the
# faults waiting behind a check see, and the daemon's CPU time, which
# other load on the host does not inflate) and their maximum.
# Benchmarks print numbers; they never fail.
# Usage (root): BUILDDIR=_build tests/bench/checkcost.sh [SECS]
SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export SRC
. "$SRC/tests/lib.sh"
need_root
SECS=${1:-2}
BASE=0x500000000000

start_daemon d --insecure
start_daemon s --insecure
UFFDD_TEST_NO_WP_TRACKING=1
export UFFDD_TEST_NO_WP_TRACKING
start_daemon u --insecure
unset UFFDD_TEST_NO_WP_TRACKING
bench_nice s u d

# one DAEMON SIZE THREADS: one export and migration, its checks' line.
one() {
	local sd=$1 size=$2 threads=$3 end range id ssock sport
	ssock=$(eval echo "\$${sd}_SOCK")
	sport=$(eval echo "\$${sd}_PORT")
	end=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$size"))))
	range=${BASE#0x}-${end#0x}
	start_workload WS source --size "$size" --threads "$threads"
	start_workload WD dest --size "$size" --touch 0
	id=$("$CLIENT" --control "$ssock" export "$WS" --range "$range")
	sleep "$SECS"
	"$CLIENT" --control "$d_SOCK" attach "$WD" --from "127.0.0.1:$sport" \
		--id "$id" --range "$range" >/dev/null
	"$CLIENT" --control "$d_SOCK" wait "$id" --timeout 600 >/dev/null 2>&1
	"$CLIENT" --control "$ssock" wait "$id" --timeout 60 >/dev/null 2>&1
	printf '%-6s %3s threads %-9s %s\n' "$size" "$threads" \
		"$([ "$sd" = s ] && echo tracked || echo untracked)" \
		"$(grep "migration ${id:0:8}.*freeze checks" "$T/$sd.log" |
			sed 's/.*: \([0-9]* freeze checks\)[^,]*, /\1, /')"
	kill -9 "$WS" "$WD" 2>/dev/null
}

for size in 256M 1G 4G; do
	one s "$size" 2
done
one s 1G 64
one u 1G 2
one u 1G 64
one u 1G 256
