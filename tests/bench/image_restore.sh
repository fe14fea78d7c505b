#!/usr/bin/env bash
# Benchmark: lazy restore from a snapshot image (docs/image-format.md,
# "Measured"). A workload of SIZE whose every page holds data is
# snapshotted, then restored into N targets at once whose 2 threads check
# every page from the moment they are attached: with attach --image on one
# daemon (local), or each from its own export --image on a second daemon
# (remote, plaintext loopback). Prints the time from the first attach to
# the last restore complete, and each target's demand faults and latency.
# Benchmarks print numbers; they never fail.
# Usage (root): BUILDDIR=_build tests/bench/image_restore.sh [N [SIZE]]
SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export SRC
. "$SRC/tests/lib.sh"
need_root
N=${1:-3}
SIZE=${2:-64M}
BASE=0x500000000000
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$SIZE"))))
RANGE=${BASE#0x}-${END#0x}

start_daemon g --insecure
start_daemon h --insecure
bench_nice g h
start_workload WS source --size "$SIZE" --threads 2 --untouched-every 0
kill -STOP "$WS"
sleep 0.2
"$CLIENT" --control "$h_SOCK" snapshot "$WS" --to "$T/i.img" --range "$RANGE" | head -n 1

for mode in local remote; do
	wds=() aps=()
	for i in $(seq "$N"); do
		start_workload "WD$i" dest --size "$SIZE" --threads 2 --prefault --untouched-every 0
		wds+=("$(eval echo "\$WD$i")")
	done
	t0=$(date +%s.%N)
	for p in "${wds[@]}"; do
		if [ "$mode" = local ]; then
			"$CLIENT" --control "$g_SOCK" attach "$p" --image "$T/i.img" \
				--range "$RANGE" --wait >"$T/a$p.out" 2>&1 &
		else
			id=$("$CLIENT" --control "$h_SOCK" export --image "$T/i.img")
			"$CLIENT" --control "$g_SOCK" attach "$p" --from "127.0.0.1:$h_PORT" \
				--id "$id" --range "$RANGE" --wait >"$T/a$p.out" 2>&1 &
		fi
		aps+=($!)
	done
	for p in "${wds[@]}"; do
		for _ in $(seq 500); do
			grep -q '^attached' "$T/a$p.out" && break
			sleep 0.01
		done
		kill -USR1 "$p"
	done
	wait "${aps[@]}"
	t1=$(date +%s.%N)
	echo "$mode: $N x $SIZE restored in $(echo "$t1 - $t0" | bc) s"
	for p in "${wds[@]}"; do
		echo "  $(grep -E '^ *(demand|moved)' "$T/a$p.out" | tr -s ' ' | tr '\n' ' ')"
		kill -9 "$p"
	done
done
