#!/bin/sh
# uffdd_migrate: whole migrations between two real uffdd daemons inside the
# test VM, over loopback TCP (--insecure: the VM has no other host and no
# network), run on both kernels by /init:
#   anon   32 MiB private anonymous memory, four faulting threads: demand
#          installs use the access hints (patch 1) where the kernel has them;
#   memfd  32 MiB memfd, every other page paged out to zram before the
#          freeze: classified from pagemap PM_SWAP (patch 2) where the kernel
#          reports it, from the backing file elsewhere.
#   precopy 32 MiB private anonymous memory, two threads rewriting a hot
#          set of 6%, exported with --precopy: on 6.1 (no WP_ASYNC) the
#          daemon tracks writes with synchronous uffd-wp and un-protects a
#          64 KiB block per write fault; the process's own faults per dirty
#          page and round show patch 4 (un-protect leaves exclusive anon
#          pages writable: the rest of the block is written without a fault;
#          transparent huge pages are off while the source maps its memory).
# Each migration is checked byte for byte twice: SHA-256 of the frozen
# source against the destination (tests/memhash), and the destination
# workload's own per-word pattern check.
# Prints INFO lines and "BENCH uffdd_<key> <n>" figures that vmtest.sh judges
# per kernel (features found, hinted pages); exits non-zero when a migration
# fails. Needs /uffdd/bin/{uffdd,uffd-client,workload,memhash} (mkinitramfs.sh).
U=${UFFDD_BIN:-/uffdd/bin}
T=$(mktemp -d /tmp/uffdd.XXXXXX)
BASE=0x500000000000
PIDS=

cleanup() {
	for p in $PIDS; do
		kill -CONT "$p" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	rm -rf "$T"
}
trap cleanup EXIT

fail() {
	echo "uffdd/migrate: $*"
	for f in "$T"/*.log; do
		[ -s "$f" ] || continue
		echo "--- $f"
		tail -n 15 "$f"
	done
	exit 1
}

# wait_for FILE PATTERN WHAT: up to 120 s
wait_for() {
	i=0
	while ! grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -le 1200 ] || fail "$3"
		sleep 0.1
	done
}

# daemon NAME PORT
daemon() {
	"$U/uffdd" -f --config "$T/empty.conf" --insecure \
		--listen "127.0.0.1:$2" --control "$T/$1.sock" \
		--state-dir "$T/$1.state" >"$T/$1.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_for "$T/$1.log" 'ready: control' "uffdd $1 did not start"
}

# workload VAR MODE ARGS...
workload() {
	var=$1
	shift
	"$U/workload" "$@" >"$T/$var.out" 2>"$T/$var.log" &
	eval "$var=$!"
	PIDS="$PIDS $!"
	wait_for "$T/$var.out" '^ready' "workload $var not ready"
}

# migrate LABEL BYTES SOURCE_ARGS DEST_ARGS
migrate() {
	label=$1 size=$2
	end=$(printf '0x%x' $((BASE + size)))
	range=$(printf '%x-%x' $((BASE)) $((BASE + size)))
	# shellcheck disable=SC2086
	workload WS source --size "$size" --threads 2 $3
	# shellcheck disable=SC2086
	workload WD dest --size "$size" --threads 4 --prefault $4
	sleep 0.5 # the source mutates for a moment
	id=$("$U/uffd-client" --control "$T/src.sock" export "$WS" --range "$range") ||
		fail "$label: export: $id"
	h_src=$("$U/memhash" "$WS" "$BASE" "$end") || fail "$label: memhash of the source"
	"$U/uffd-client" --control "$T/dst.sock" attach "$WD" --from 127.0.0.1:7101 \
		--id "$id" --range "$range" >"$T/attach.out" 2>&1
	grep -q '^attached' "$T/attach.out" || fail "$label: attach: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	"$U/uffd-client" --control "$T/dst.sock" wait "$id" --timeout 600 >"$T/wait.out" 2>&1 ||
		fail "$label: wait: $(cat "$T/wait.out")"
	wait_for "$T/WD.out" '^verified' "$label: destination workload never finished checking"
	grep -q '^verified [0-9]* pages, 0 mismatches, 0 lost' "$T/WD.out" ||
		fail "$label: destination saw wrong bytes: $(grep verified "$T/WD.out")"
	h_dst=$("$U/memhash" "$WD" "$BASE" "$end") || fail "$label: memhash of the destination"
	[ "$h_src" = "$h_dst" ] || fail "$label: destination differs: source $h_src, destination $h_dst"
	"$U/uffd-client" --control "$T/src.sock" wait "$id" --timeout 60 >/dev/null 2>&1 ||
		fail "$label: source side did not complete"
	"$U/uffd-client" --control "$T/dst.sock" status "$id" --json >"$T/status.json" ||
		fail "$label: status"
	hinted=$(sed -n 's/.*"hinted_pages":\([0-9]*\).*/\1/p' "$T/status.json")
	kernel=$(sed -n 's/.*"kernel":"\([^"]*\)".*/\1/p' "$T/status.json")
	swapped=$(sed -n 's/^swapped //p' "$T/WS.out")
	echo "INFO uffdd/migrate: $label: $(grep -o 'verified [0-9]* pages' "$T/WD.out"), sha256 equal, hinted ${hinted:-?}, source swapped ${swapped:-0}"
	echo "BENCH uffdd_${label}_hinted ${hinted:-0}"
	echo "BENCH uffdd_${label}_swapped ${swapped:-0}"
	kill "$WD" 2>/dev/null
	wait "$WD" 2>/dev/null
}

# precopy_migrate: the pre-copy case above. The source is kept (stopped)
# so that its frozen memory can be hashed after the switchover.
precopy_migrate() {
	size=$((32 << 20))
	end=$(printf '0x%x' $((BASE + size)))
	range=$(printf '%x-%x' $((BASE)) $((BASE + size)))
	# Small pages: 6.1 splits a protected huge page into clean PTEs on the
	# first un-protect, and patch 4 leaves only dirty ones writable, so on
	# huge pages its effect shows from the second round on only.
	thp=/sys/kernel/mm/transparent_hugepage/enabled
	old_thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$thp" 2>/dev/null)
	[ -z "$old_thp" ] || echo never >"$thp"
	workload WS source --size "$size" --threads 2 --hot 6 --pace-us 100
	workload WD dest --size "$size" --threads 4 --prefault
	sleep 0.5
	id=$("$U/uffd-client" --control "$T/src.sock" export "$WS" --range "$range" \
		--precopy --keep-source --max-rounds 6 --precopy-threshold 4096) ||
		fail "precopy: export: $id"
	"$U/uffd-client" --control "$T/dst.sock" attach "$WD" --from 127.0.0.1:7101 \
		--id "$id" --range "$range" >"$T/attach.out" 2>&1
	grep -q '^attached' "$T/attach.out" || fail "precopy: attach: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	"$U/uffd-client" --control "$T/dst.sock" wait "$id" --timeout 600 >"$T/wait.out" 2>&1 ||
		fail "precopy: wait: $(cat "$T/wait.out")"
	"$U/uffd-client" --control "$T/src.sock" wait "$id" --timeout 60 >/dev/null 2>&1 ||
		fail "precopy: source side did not complete"
	wait_for "$T/WD.out" '^verified' "precopy: destination workload never finished checking"
	grep -q '^verified [0-9]* pages, 0 mismatches, 0 lost' "$T/WD.out" ||
		fail "precopy: destination saw wrong bytes: $(grep verified "$T/WD.out")"
	h_src=$("$U/memhash" "$WS" "$BASE" "$end") || fail "precopy: memhash of the source"
	h_dst=$("$U/memhash" "$WD" "$BASE" "$end") || fail "precopy: memhash of the destination"
	[ "$h_src" = "$h_dst" ] || fail "precopy: destination differs: source $h_src, destination $h_dst"
	grep -q 'tracked with synchronous uffd-wp' "$T/src.log" && sync=1 || sync=0
	# "pre-copy round N (synchronous uffd-wp): P pages written, W write
	# faults answered, process faults m minor M major", one per round
	grep 'synchronous uffd-wp):' "$T/src.log" | sed 's/.*pre-copy round/INFO uffdd\/migrate: precopy round/'
	set -- $(sed -n 's/.*synchronous uffd-wp): \([0-9]*\) pages written, \([0-9]*\) write faults answered, process faults \([0-9-]*\) minor \([0-9-]*\) major.*/\1 \2 \3 \4/p' "$T/src.log" |
		awk '{p += $1; w += $2; f += $3 + $4; n++} END {printf "%d %d %d %d %d", n, p, w, f, p ? 100 * f / p : -1}')
	echo "INFO uffdd/migrate: precopy: $(grep -o 'verified [0-9]* pages' "$T/WD.out"), sha256 equal, synchronous uffd-wp $sync, $1 rounds logged: $2 dirty pages, $3 write faults answered by the daemon, $4 faults taken by the process ($5 per 100 dirty pages)"
	echo "BENCH uffdd_precopy_sync $sync"
	echo "BENCH uffdd_precopy_dirty_pages ${2:-0}"
	echo "BENCH uffdd_precopy_answered ${3:-0}"
	echo "BENCH uffdd_precopy_faults ${4:-0}"
	echo "BENCH uffdd_precopy_faults_per_100 ${5:--1}"
	kill -9 "$WS" "$WD" 2>/dev/null
	wait "$WD" 2>/dev/null
	[ -z "$old_thp" ] || echo "$old_thp" >"$thp"
}

ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up || fail "cannot bring lo up"
[ -n "$(sed 1d /proc/swaps)" ] || echo "INFO uffdd/migrate: no swap: memfd pages will not be swapped out"
: >"$T/empty.conf"
daemon src 7101
daemon dst 7102
kernel=$(sed -n 's/.*kernel: //p' "$T/dst.log" | head -1)
echo "INFO uffdd/migrate: daemon found: $kernel"
case $kernel in *"access_likely yes"*) al=1 ;; *) al=0 ;; esac
case $kernel in *"shmem_pm_swap yes"*) ps=1 ;; *) ps=0 ;; esac
echo "BENCH uffdd_access_likely $al"
echo "BENCH uffdd_shmem_pm_swap $ps"
case $kernel in *"uffd_wp_sync yes"*) ws=1 ;; *) ws=0 ;; esac
case $kernel in *"wp_unprotect_writable yes"*) wu=1 ;; *) wu=0 ;; esac
echo "BENCH uffdd_uffd_wp_sync $ws"
echo "BENCH uffdd_wp_unprotect_writable $wu"

migrate anon $((32 << 20)) "" ""
migrate memfd $((32 << 20)) "--kind memfd --pageout-every 2 --zero-every 16" \
	"--kind memfd --zero-every 16"
precopy_migrate
echo "INFO uffdd/migrate: anon, half-swapped memfd and pre-copied anon migrations byte-exact"
