#!/usr/bin/env bash
# Benchmark: the working set of a restore (docs/image-format.md, "The
# working set"). A workload of SIZE whose every page holds data is
# snapshotted to a file on disk (DIR, default /var/tmp); a target restored
# from it with attach --image touches TOUCH fixed random pages (tests/
# workload dest --touch, one at a time) from the moment it is attached.
# A plain restore (no working set) first; then one that records the pages
# its target faulted (--record-working-set, which holds the bulk stream
# while it records) into the image; then one that sends them first. The page cache is
# dropped before each restore (echo 3 >/proc/sys/vm/drop_caches). Prints,
# for each, the target's demand faults and the time from its start to its
# last touch done, and the restore's total time. Then image reads with
# pread against io_uring (bench_image_read, and the third restore from a
# daemon reading with pread, alternating with the default), BENCH_ROUNDS
# times (default 3).
# Benchmarks print numbers; they never fail.
# Usage (root): BUILDDIR=_build tests/bench/working_set.sh [SIZE [TOUCH]]
SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export SRC
. "$SRC/tests/lib.sh"
need_root
SIZE=${1:-1G}
NPAGES=$(($(numfmt --from=iec "$SIZE") / 4096))
TOUCH=${2:-$((NPAGES / 10))}
BASE=0x500000000000
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$SIZE"))))
RANGE=${BASE#0x}-${END#0x}
DIR=${DIR:-/var/tmp}/uffdd-ws-bench-$$
mkdir -p "$DIR" && on_cleanup "rm -rf $DIR"
IMG=$DIR/i.img

start_daemon g --insecure
bench_nice g
start_workload WS source --size "$SIZE" --threads 2 --untouched-every 0
kill -STOP "$WS"
sleep 0.2
"$CLIENT" --control "$g_SOCK" snapshot "$WS" --to "$IMG" --range "$RANGE" | head -n 1

# [D=DAEMON] run NAME ARGS...: one restore, the page cache dropped first.
run() {
	local name=$1 ap t0 t1 t2
	shift
	start_workload WD dest --size "$SIZE" --touch "$TOUCH" --untouched-every 0
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(date +%s.%N)
	local sock=${D:-g}_SOCK
	"$CLIENT" --control "${!sock}" attach "$WD" --image "$IMG" --range "$RANGE" \
		"$@" --wait >"$T/a.out" 2>&1 &
	ap=$!
	for _ in $(seq 1000); do
		grep -q '^attached' "$T/a.out" && break
		sleep 0.005
	done
	kill -USR1 "$WD"
	for _ in $(seq 60000); do
		grep -q '^touched' "$T/WD.out" && break
		sleep 0.005
	done
	t1=$(date +%s.%N)
	wait "$ap"
	t2=$(date +%s.%N)
	echo "$name: $(grep '^touched' "$T/WD.out"); touches done in" \
		"$(echo "$t1 - $t0" | bc) s, restore complete in $(echo "$t2 - $t0" | bc) s"
	grep '^working set' "$T/a.out" || true
	kill -9 "$WD"
}

run plain
run first --record-working-set --ws-secs "${WS_SECS:-30}"
"$CLIENT" image info "$IMG" | grep '^working set'
run second

# Image reads, pread against io_uring read-ahead (the daemon's default):
# the reader alone, then the restore with the working set, from a second
# daemon that reads with pread, alternating with the first.
nice -n "${BENCH_NICE:-$(unit_nice)}" \
	"$BUILDDIR/tests/bench/bench_image_read" "$IMG" "${BENCH_ROUNDS:-3}"
UFFDD_TEST_IMAGE_IO=pread start_daemon p --insecure
bench_nice p
for _ in $(seq "${BENCH_ROUNDS:-3}"); do
	D=p run "second, pread"
	D=g run "second, io_uring"
done
