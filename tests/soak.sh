#!/usr/bin/env bash
# The soak (make soak; not part of CI): repeated migrations for a bounded
# time (SOAK_SECONDS, default 600) with random link cuts and daemon kills,
# each migration checked byte for byte. One target in three forks during
# its migration: the child discards pages at once, or the parent exits at
# once (a daemon detaching, its child then migrated alone), or neither; the
# child checks its own memory. Prints migrations done, faults
# served, cuts and kills survived, and bytes lost, which must be 0.
BUILDDIR=$(cd "${1:-_build}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
export BUILDDIR SRC
. "$SRC/tests/lib.sh"
need_root
SECS=${SOAK_SECONDS:-600}
make_hosts
start_daemon src --bulk-rate 32M
start_daemon dst
done_n=0 faults=0 cuts=0 kills=0 lost=0 bytes=0 i=0
t_end=$(($(date +%s) + SECS))
while [ "$(date +%s)" -lt "$t_end" ]; do
	i=$((i + 1))
	base=$((0x500000000000 + (i % 16) * 0x100000000))
	end=$((base + (128 << 20)))
	range=$(printf '%x-%x' "$base" "$end")
	start_workload WS source --size 128M --threads 2 --base "$base" --seed "$i"
	ev=()
	case $((i % 6)) in
	0) ev=(--event fork) ;;
	3) ev=(--event fork-remove) ;;
	5) ev=(--event fork-exit) ;;
	esac
	start_workload WD dest --size 128M --threads 8 --pace-us 200 --base "$base" --seed "$i" "${ev[@]}"
	id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range")
	src_hash h_src "$WS" "$base" "$end"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$id" --range "$range" >/dev/null
	kill -USR1 "$WD"
	CHILD=
	[ "${ev[1]:-}" = fork-exit ] && idle_child WD
	sleep "0.$((RANDOM % 9 + 1))"
	case $((RANDOM % 4)) in
	0)
		cut_link "$src_PORT"
		sleep $((RANDOM % 6 + 1))
		heal_link
		cuts=$((cuts + 1))
		;;
	1)
		kill_daemon dst
		sleep 0.$((RANDOM % 9 + 1))
		restart_daemon dst
		kills=$((kills + 1))
		;;
	2)
		kill_daemon src
		sleep 0.$((RANDOM % 9 + 1))
		restart_daemon src
		kills=$((kills + 1))
		;;
	esac
	"$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 300 >/dev/null 2>&1 ||
		fail "migration $i did not complete"
	if [ -n "$CHILD" ]; then
		# The target exited: its child holds the migrated memory.
		h_dst=$(dst_hash h_src "$CHILD" "$base" "$end")
		kill -USR1 "$CHILD"
	else
		wait_verified WD >/dev/null
		h_dst=$(dst_hash h_src "$WD" "$base" "$end")
	fi
	[ ${#ev[@]} = 0 ] || wait_child_verified WD "migration $i, forked child" >/dev/null
	if [ "$h_src" != "$h_dst" ]; then
		lost=$((lost + (128 << 20)))
		echo "migration $i: destination differs from the source"
	fi
	f=$("$CLIENT" --control "$dst_SOCK" status "$id" --json | sed 's/.*"demand_faults":\([0-9]*\).*/\1/')
	faults=$((faults + f))
	bytes=$((bytes + (128 << 20)))
	done_n=$((done_n + 1))
	# Only the destination: the source daemon killed the source process,
	# and its pid may belong to someone else by now.
	kill "$WD" 2>/dev/null || true
	echo "soak: $done_n migrations, $faults faults served, $cuts cuts, $kills daemon kills survived, $lost bytes lost"
done
echo "soak result: $done_n migrations ($((bytes >> 20)) MiB), $faults faults served, $cuts link cuts and $kills daemon kills survived, $lost bytes lost"
[ "$lost" -eq 0 ]
