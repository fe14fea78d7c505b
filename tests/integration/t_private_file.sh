#!/usr/bin/env bash
# Private file mappings: a file on a disk filesystem, mapped MAP_PRIVATE by
# source and destination at the same address. The pages the source wrote
# (resident, swapped out on zram, zero-filled) are anonymous copies and must
# arrive byte-exact; the pages it never wrote (half of them read, so
# resident as the file's) must read as the file on the destination, whose
# own earlier writes there (--prefault) are discarded. 256 written pages in
# the middle are read-only on both sides (as RELRO is) and arrive too. The file on disk is
# never written. Both classification paths. Then the refusals: a
# destination that maps another file, or nothing, at that address, or a
# file whose path is too long to tell from another's, gets a clear error
# and is left as it was; and when the written pages are lost
# while the target is held, or the destination daemon dies holding it, it
# is left stopped, never run on stale pages unnoticed.
. "$SRC/tests/lib.sh"
need_root
DIR=/var/tmp/uffdd-private-file-$$
mkdir -p "$DIR" || skip "cannot create $DIR"
on_cleanup "rm -rf $DIR"
fstype=$(stat -f -c %T "$DIR")
case "$fstype" in
tmpfs | ramfs) skip "$DIR is on $fstype, not a disk filesystem" ;;
esac
info "file on $fstype ($DIR)"
set_up_zram_swap 1G
FILE=$DIR/data

# wait_stopped PID WHAT: the process is stopped (T) within 5 s.
wait_stopped() {
	for _ in $(seq 50); do
		[ "$(proc_state "$1")" = T ] && return
		sleep 0.1
	done
	fail "target not $2 (state $(proc_state "$1"))"
}
for how in scan read; do
	args=""
	[ "$how" = read ] && args=--no-pagemap-scan
	rm -f "$FILE"
	info "private file mapping, classification by $how"
	# The source creates and fills the file; hash it before it maps it
	# again on the destination, and after.
	SRC_DAEMON_ARGS=$args migrate 32M 2 4 \
		"--kind file-private --file $FILE --untouched-every 4 --pageout-every 5 --zero-every 16 --ro-pages 256" \
		"--kind file-private --file $FILE --untouched-every 4 --zero-every 16 --ro-pages 256"
	grep -q "exported process $WS as .*: 3 regions" "$T/src.log" ||
		fail "the read-only middle is not a region of its own: $(grep exported "$T/src.log")"
	swapped=$(sed -n 's/^swapped //p' "$T/WS.out")
	info "file-private: $swapped written pages swapped out when ready, $SRC_SWAPPED still out at attach"
	[ "${swapped:-0}" -gt 100 ] || fail "too few pages swapped out ($swapped)"
	[ "$SRC_SWAPPED" -ge "$swapped" ] || fail "only $SRC_SWAPPED of $swapped swapped pages still out at attach"
	# The file is what the source wrote at creation, untouched since:
	# an independent workload maps it and finds every page the file's.
	f_hash=$(sha256sum "$FILE" | cut -d' ' -f1)
	grep -q "held until the pages it wrote in private file mappings" "$T/dst.log" ||
		fail "destination did not hold the target for its private file pages"
	# Exactly the written pages were written into the destination: 3 of
	# every 4 (--untouched-every 4); the file's own pages went as markers.
	n=$(sed -n 's/.*"demand_pages":\([0-9]*\).*"prefetched_pages":\([0-9]*\).*/\1 \2/p' "$T/status.json")
	[ "$(( ${n% *} + ${n#* } ))" = 6144 ] || fail "written pages sent: $n, want 6144 in all"
	kill "$WD"
	start_workload WF dest --size 32M --kind file-private --file "$FILE" --untouched-every 1 --threads 2
	kill -USR1 "$WF"
	wait_verified WF
	kill "$WF"
	[ "$(sha256sum "$FILE" | cut -d' ' -f1)" = "$f_hash" ] || fail "the file changed"
done

info "refusals: another file, or nothing, at the source's address"
ensure_daemon src
ensure_daemon dst
rm -f "$FILE" "$DIR/other"
base=0x500000000000
end=$(printf '0x%x' $((base + (8 << 20))))
RANGE=$(printf '%x-%x' $base "$end")
start_workload WS source --size 8M --kind file-private --file "$FILE"
start_workload WD dest --size 8M --kind file-private --file "$DIR/other" --prefault
id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
h_before=$(mem_state "$WD" $base "$end")
if checked "$T/attach.out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$id" --range "$RANGE"; then
	fail "attach to a mapping of another file succeeded: $(cat "$T/attach.out")"
fi
cat "$T/attach.out"
grep -q "mapped privately at offset 0x0 with [0-9]* written pages, has no match in process $WD" "$T/attach.out" ||
	fail "no clear error for another file: $(cat "$T/attach.out")"
grep -q "$DIR/other" "$T/attach.out" || fail "the error does not name what is mapped there"
[ "$(proc_state "$WD")" != t ] || fail "refused target left traced"
! ls -l "/proc/$WD/fd" | grep -q userfaultfd || fail "refused target holds a userfaultfd"
[ "$(mem_state "$WD" $base "$end")" = "$h_before" ] || fail "refused attach changed the target's memory"
kill "$WD"
# Two files whose paths agree in the first 300 characters: a region's
# name holds fewer, so they would look the same. Refused, not matched.
LONG=$DIR/$(printf 'd%.0s' $(seq 150))/$(printf 'e%.0s' $(seq 150))
mkdir -p "$LONG"
start_workload WL source --size 8M --kind file-private --file "$LONG/one" --base 0x540000000000
start_workload WD dest --size 8M --kind file-private --file "$LONG/two" --base 0x540000000000 --prefault
LRANGE=540000000000-540000800000
lid=$("$CLIENT" --control "$src_SOCK" export "$WL" --range "$LRANGE")
h_before=$(mem_state "$WD" 0x540000000000 0x540000800000)
if checked "$T/attach.out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$lid" --range "$LRANGE"; then
	fail "attach to another file with the same long prefix succeeded: $(cat "$T/attach.out")"
fi
grep -q "a path this long cannot be matched safely" "$T/attach.out" ||
	fail "no clear error for a cut path: $(cat "$T/attach.out")"
[ "$(mem_state "$WD" 0x540000000000 0x540000800000)" = "$h_before" ] ||
	fail "refused attach changed the target's memory"
kill "$WD" "$WL"
start_workload WD dest --size 8M --base 0x600000000000 --prefault
if checked "$T/attach.out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$id" --range "$RANGE"; then
	fail "attach with nothing mapped succeeded: $(cat "$T/attach.out")"
fi
grep -q "nothing mapped there" "$T/attach.out" || fail "no clear error for an unmapped address: $(cat "$T/attach.out")"
[ "$(proc_state "$WS")" = T ] || fail "source not left frozen for another attach"
kill "$WD"

# The written pages can no longer be had once the target is held: the file
# is truncated under the migration, which drops the source's copies beyond
# the new end too. The target must not run on the file's pages: it is left
# stopped, and the migration fails loudly.
info "the written pages are lost while the target is held"
start_workload WD dest --size 8M --kind file-private --file "$FILE"
truncate -s 0 "$FILE"
SAN_WHO="attach of lost pages" checked "$T/attach.out" "$CLIENT" --control "$dst_SOCK" \
	attach "$WD" --from "$src_ADDR:$src_PORT" --id "$id" --range "$RANGE" || true
cat "$T/attach.out"
if SAN_WHO="wait of lost pages" checked "$T/wait.out" "$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 60; then
	fail "migration of lost pages completed: $(cat "$T/wait.out")"
fi
grep -q "failed: .*target $WD stopped (pages it wrote in private file mappings never arrived)" "$T/wait.out" ||
	fail "wait did not report the failure: $(cat "$T/wait.out")"
wait_stopped "$WD" "left stopped"
grep -q "left stopped: [0-9]* pages of its private file mappings never arrived" "$T/dst.log" ||
	fail "no word of the stopped target in the log"
! grep -q "^verified" "$T/WD.out" || fail "the target ran and checked its pages"
info "target $WD left stopped: $(grep 'left stopped' "$T/dst.log" | tail -1)"
kill "$WD"

# The destination daemon dies while it holds the target: its ptrace hold
# dies with it and the target runs on the file's pages where the source had
# its own. The restarted daemon cannot undo that; it stops the target and
# says so instead of resuming as if nothing happened.
info "the destination daemon dies while it holds the target"
rm -f "$FILE"
big=$((256 << 20))
end=$(printf '0x%x' $((base + big)))
RANGE=$(printf '%x-%x' $base "$end")
start_workload WS source --size 256M --kind file-private --file "$FILE" --untouched-every 0 --threads 1
start_workload WD dest --size 256M --kind file-private --file "$FILE"
id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$id" --range "$RANGE" >"$T/attach.out" 2>&1 &
held=""
for _ in $(seq 2000); do
	grep -qs '^held=1' "$(state_dir dst)/$id.destination.state" && held=1 && break
	sleep 0.005
done
[ -n "$held" ] || fail "the destination never recorded that it holds the target"
kill_daemon dst
restart_daemon dst
grep -q "process $WD was let go before the pages it wrote in private file mappings arrived" "$T/dst.log" ||
	fail "the restarted daemon did not say the target ran too early: $(tail -5 "$T/dst.log")"
wait_stopped "$WD" "stopped after the restart"
[ ! -e "$(state_dir dst)/$id.destination.state" ] || fail "the failed migration's state file is still there"
info "restart while held: target $WD stopped, migration reported failed"
