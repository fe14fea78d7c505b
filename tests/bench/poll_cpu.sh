#!/usr/bin/env bash
# Benchmark: what busy polling after demand traffic (--poll-us) costs and
# gives. One source and one destination daemon per setting, started with
# --poll-us 0 and then with the default, alternately, ROUNDS times each; in
# each round a destination thread touches 10000 random pages of 256 MiB one
# at a time while the bulk lane is held back (the idle fault case of make
# bench, longer). Prints per round the fault latency p50/p99 and each
# daemon's CPU (user+sys, /proc/PID/stat) per fault, from attach to the
# last touch. Unpinned, as the daemons run: the placement across vCPUs is
# what polling is about. Benchmarks print numbers; they never fail.
# Usage (root): BUILDDIR=_build tests/bench/poll_cpu.sh [ROUNDS]
SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export SRC
. "$SRC/tests/lib.sh"
need_root
ROUNDS=${1:-3}
n=0
# one POLL_US: a pair of daemons with that setting, one round.
one() {
	local poll=$1 s=s$n d=d$n base end range id sc0 dc0 faults line
	n=$((n + 1))
	base=$((0x500000000000 + n * 0x100000000))
	end=$((base + (256 << 20)))
	range=$(printf '%x-%x' "$base" "$end")
	start_daemon "$s" --insecure --poll-us "$poll"
	UFFDD_BENCH_BULK_DELAY_MS=8000 start_daemon "$d" --insecure --poll-us "$poll"
	start_workload WS source --size 256M --threads 1 --untouched-every 0 --base "$base"
	start_workload WD dest --size 256M --touch 10000 --base "$base"
	id=$("$CLIENT" --control "$(eval echo "\$${s}_SOCK")" export "$WS" --range "$range")
	sc0=$(cpu_s "$(eval echo "\$${s}_PID")")
	dc0=$(cpu_s "$(eval echo "\$${d}_PID")")
	"$CLIENT" --control "$(eval echo "\$${d}_SOCK")" attach "$WD" \
		--from "127.0.0.1:$(eval echo "\$${s}_PORT")" --id "$id" --range "$range" >/dev/null ||
		fail "attach failed"
	kill -USR1 "$WD"
	for _ in $(seq 3000); do
		grep -q '^touched' "$T/WD.out" && break
		sleep 0.01
	done
	line=$(grep '^touched' "$T/WD.out") || fail "the toucher did not finish"
	faults=$(echo "$line" | awk '{print $4}')
	printf '%-9s %6s faults  p50 %6s us  p99 %6s us  CPU per fault: source %5.1f us, destination %5.1f us\n' \
		"$poll" "$faults" "$(echo "$line" | awk '{print $6}')" "$(echo "$line" | awk '{print $8}')" \
		"$(echo "($(cpu_s "$(eval echo "\$${s}_PID")") - $sc0) * 1000000 / $faults" | bc -l)" \
		"$(echo "($(cpu_s "$(eval echo "\$${d}_PID")") - $dc0) * 1000000 / $faults" | bc -l)"
	kill "$WD" "$WS" 2>/dev/null
	kill_daemon "$s"
	kill_daemon "$d"
}
echo "poll-us   faults, fault latency and daemon CPU per fault (attach included)"
for _ in $(seq "$ROUNDS"); do
	one 0
	one 100
done
