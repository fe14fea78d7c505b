#!/usr/bin/env bash
# export --precopy with the synchronous write-protect fallback (kernels 6.1
# to 6.6, forced here with UFFDD_TEST_SYNC_WP=1 on a kernel that also has
# WP_ASYNC): a process writing to a hot set is pre-copied while the source
# daemon answers its write faults, and the destination ends byte for byte
# equal to the source at its freeze (kept with --keep-source, hashed by
# memhash). Also with some writes made by the kernel (read() into the hot
# set: they must wait for the daemon, not fail with EFAULT), with
# transparent huge pages, and with pages discarded during the rounds. The
# frozen source is left with nothing protected and no userfaultfd. Shared
# memory, which the fallback cannot track, is refused naming the feature,
# and the process runs on.
. "$SRC/tests/lib.sh"
need_root
UFFDD_TEST_SYNC_WP=1
export UFFDD_TEST_SYNC_WP
start_daemon src
unset UFFDD_TEST_SYNC_WP
start_daemon dst
grep -q 'uffd_wp_sync yes' "$T/src.log" ||
	skip "no synchronous uffd-wp here: $(grep -o 'kernel: .*' "$T/src.log")"
BASE=0x500000000000
key() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }

# sync_migration LABEL SIZE SOURCE_ARGS DEST_ARGS
sync_migration() {
	local label=$1 size=$2 end range h_src h_dst
	end=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$size"))))
	range=$(printf '%x-%x' $((BASE)) $((end)))
	# shellcheck disable=SC2086
	start_workload WS source --size "$size" $3
	# shellcheck disable=SC2086
	start_workload WD dest --size "$size" $4
	sleep 0.2
	# Before the export: the tracker may split huge pages.
	AHP=$(anon_huge_kb "$WS" $BASE "$end")
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range" --precopy --keep-source) ||
		fail "$label: export failed"
	[ "$(proc_state "$WS")" != T ] || fail "$label: source stopped at the export"
	grep -qE 'VmFlags:.* uw( |$)' "/proc/$WS/smaps" ||
		fail "$label: nothing write-protected in the running source"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
		--id "$ID" --range "$range" >"$T/attach.out" || fail "$label: attach: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" ||
		fail "$label: wait: $(cat "$T/wait.out")"
	SAN_WHO="wait (source)" checked "$T/src-wait.out" "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 ||
		fail "$label: source side did not complete: $("$CLIENT" --control "$src_SOCK" status "$ID")"
	[ "$(proc_state "$WS")" = T ] || fail "$label: source not left stopped"
	if [ "$label" = hot ]; then wait_verified WD; fi
	h_src=$("$MEMHASH" "$WS" $BASE "$end")
	h_dst=$("$MEMHASH" "$WD" $BASE "$end")
	[ "$h_src" = "$h_dst" ] || fail "$label: destination differs from the source at its freeze"
	grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$WS/smaps" &&
		fail "$label: frozen source still has ranges registered with a userfaultfd"
	ls -l "/proc/$WS/fd" | grep -q userfaultfd && fail "$label: source process holds a userfaultfd"
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/$label.dst.json"
	ROUNDS=$(key "$T/$label.dst.json" precopy_rounds)
	info "$label: sha256 $h_src equal on both sides after $ROUNDS rounds"
}

sync_migration hot 64M "--threads 2 --hot 3 --pace-us 20 --syscall-every 4" "--threads 4 --prefault"
[ "$ROUNDS" -ge 2 ] || fail "hot: $ROUNDS rounds"
grep -q "migration ${ID:0:8}.*tracked with synchronous uffd-wp" "$T/src.log" ||
	fail "the source daemon did not say it used the synchronous tracker"
grep 'synchronous uffd-wp):' "$T/src.log" | sed 's/.*pre-copy/  pre-copy/'
answered=$(sed -n 's/.* \([0-9]*\) write faults answered.*/\1/p' "$T/src.log" | awk '{s += $1} END {print s + 0}')
[ "$answered" -gt 0 ] || fail "hot: no write fault answered during the rounds"
info "hot: $answered write faults answered in all"
kill -9 "$WS" "$WD"

sync_migration thp 32M "--kind thp --threads 2 --hot 3 --pace-us 50 --zero-every 16" "--kind thp --touch 0"
[ "$AHP" -ge $((32 * 1024 / 2)) ] || fail "thp: the source had only $AHP kB of its 32 MiB in huge pages at the export"
info "thp: $AHP kB of huge pages in the source at the export"
kill -9 "$WS" "$WD"

sync_migration discards 32M "--threads 2 --hot 3 --pace-us 50 --discard-every 8" "--touch 0"
kill -9 "$WS" "$WD"

info "shared memory is refused by the synchronous tracker"
start_workload WS source --size 32M --threads 1 --hot 3 --pace-us 100 --kind memfd
R32=$(printf '%x-%x' $((BASE)) $((BASE + 32 * 1024 * 1024)))
if checked "$T/refused.out" "$CLIENT" --control "$src_SOCK" export "$WS" --range "$R32" --precopy; then
	fail "--precopy of a memfd accepted by the synchronous tracker: $(cat "$T/refused.out")"
fi
grep -q 'not private anonymous memory' "$T/refused.out" && grep -q 'UFFD_FEATURE_WP_ASYNC' "$T/refused.out" ||
	fail "refusal does not name the memory kind and the feature: $(cat "$T/refused.out")"
info "refused: $(cat "$T/refused.out")"
h1=$("$MEMHASH" "$WS" $BASE $((BASE + 32 * 1024 * 1024)))
sleep 0.3
h2=$("$MEMHASH" "$WS" $BASE $((BASE + 32 * 1024 * 1024)))
[ "$(proc_state "$WS")" != T ] && [ "$h1" != "$h2" ] || fail "refused export left the process stopped"
ls -l "/proc/$WS/fd" | grep -q userfaultfd && fail "refused export left a userfaultfd in the process"
kill -9 "$WS"
info "process kept running, nothing registered"
