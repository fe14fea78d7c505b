#!/usr/bin/env bash
# A target that replaces the memfd under an exported region between the
# export and the freeze: the same name, size, offset and address
# (MAP_SHARED|MAP_FIXED), another file (workload --swap-on-usr2 new), or
# the same one mapped again (same). What the daemon reads must be what the
# process holds at its freeze, or the migration is refused saying the
# mapping changed: never a destination that completes on memory the
# source no longer has (hashes by memhash, independent of the daemon).
#  1. export --deferred, the swap, then go (post-copy).
#  2. export --deferred --precopy: rounds, the swap while the mutators
#     write on (into the new file), then go.
#  3. export --deferred --precopy --track-unstopped: the writer pauses on
#     its own, go; between the switchover and the commit (held back) it
#     maps the same file again in place and writes through the new
#     mapping, which its tracker does not cover.
. "$SRC/tests/lib.sh"
need_root
start_daemons_commit_held 2500
BASE=0x500000000000
HOLD=$(printf '0x%x' $((BASE + 0x10000000000)))
SIZE=16M
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec $SIZE))))
RANGE=$(printf '%x-%x' $((BASE)) $((END)))
HRANGE=$(printf '%x-%x' $((HOLD)) $((HOLD + $(numfmt --from=iec $SIZE))))
CHANGED='mapping .*changed\|mapped, moved or dropped\|replaced'
src() { "$CLIENT" --control "$src_SOCK" "$@"; }
dst() { "$CLIENT" --control "$dst_SOCK" "$@"; }
new_id() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
# A refusal that does not say why is told at the end, after every part.
PROBLEMS=()
unclear() {
	PROBLEMS+=("$1")
	info "PROBLEM: $1"
}

# swapped VAR HOW: process VAR's mapping replaced (workload --swap-on-usr2).
swapped() { usr2_said "$1" "^swapped $2"; }

# equal_or_fail WHO HASHED_PID START: a migration that completed ended
# byte for byte equal to the process's memory.
equal_or_fail() {
	local who=$1 hp=$2 hstart=$3 h_src h_dst
	h_src=$("$MEMHASH" "$hp" "$hstart" $((hstart + $(numfmt --from=iec $SIZE))))
	h_dst=$("$MEMHASH" "$WD" "$BASE" "$END")
	[ "$h_src" = "$h_dst" ] ||
		fail "$who: TORN: the destination completed on memory that differs from the source's ($h_src, destination $h_dst)"
	info "$who: completed, equal: sha256 $h_src"
}

info "1. post-copy: export --deferred, the memfd replaced, go"
start_workload WS source --kind memfd --size $SIZE --threads 2 --swap-on-usr2 new
start_workload WD dest --kind memfd --size $SIZE --threads 2
ID=$(new_id)
src export "$WS" --range "$RANGE" --deferred --keep-source --id "$ID" >/dev/null ||
	fail "1: export --deferred failed"
dst attach "$WD" --from "127.0.0.1:$src_PORT" --id "$ID" --range "$RANGE" \
	>"$T/attach.out" || fail "1: attach: $(cat "$T/attach.out")"
swapped WS new
kill -STOP "$WS"
wait_stopped "$WS"
if src go "$ID" >"$T/go.out" 2>&1; then
	kill -USR1 "$WD"
	dst wait "$ID" --timeout 120 >"$T/wait.out" || fail "1: wait: $(cat "$T/wait.out")"
	wait_verified WD
	equal_or_fail "1 (post-copy)" "$WS" $((BASE))
else
	grep -qi -- "$CHANGED" "$T/go.out" ||
		unclear "1: go refused, not saying the mapping changed: $(cat "$T/go.out")"
	info "1 (post-copy): refused: $(head -n 1 "$T/go.out")"
	src cancel "$ID" >/dev/null 2>&1 || true
fi
kill -9 "$WS" "$WD" 2>/dev/null || true

info "2. pre-copy: rounds, the memfd replaced and written, go"
start_workload WS source --kind memfd --size $SIZE --threads 2 --hot 10 \
	--pace-us 20 --swap-on-usr2 new
start_workload WD dest --kind memfd --size $SIZE --threads 2
ID=$(src export "$WS" --range "$RANGE" --deferred --precopy --keep-source) ||
	fail "2: export failed"
dst attach "$WD" --from "127.0.0.1:$src_PORT" --id "$ID" --range "$RANGE" \
	>"$T/attach.out" || fail "2: attach: $(cat "$T/attach.out")"
precopy_ready src "$ID"
swapped WS new
sleep 0.5 # paced rounds meanwhile, the mutators writing the new file
rm -f "$T/wait.out"
if src go "$ID" >"$T/go.out" 2>&1 &&
	dst wait "$ID" --timeout 120 >"$T/wait.out" 2>&1; then
	kill -USR1 "$WD"
	wait_verified WD
	src wait "$ID" --timeout 60 >/dev/null 2>&1 || fail "2: source side did not complete"
	equal_or_fail "2 (pre-copy)" "$WS" $((BASE))
else
	# Failed before go, go says only that: the status says why.
	src status "$ID" >>"$T/go.out" 2>&1
	[ ! -f "$T/wait.out" ] || cat "$T/wait.out" >>"$T/go.out"
	grep -qi -- "$CHANGED" "$T/go.out" ||
		unclear "2: refused, not saying the mapping changed: $(tr '\n' ' ' <"$T/go.out")"
	info "2 (pre-copy): refused: $(grep -o "failed: .*" "$T/go.out" | head -n 1)"
fi
kill -9 "$WS" "$WD" 2>/dev/null || true

info "3. pre-copy --track-unstopped: the writer maps its file again after go"
tracked_go 3 --kind memfd --size $SIZE --threads 2 --hot 10 --pace-us 20 \
	--swap-on-usr2 same
h_freeze=$(mem_state "$H" "$HOLD" $((HOLD + $(numfmt --from=iec $SIZE))))
# The COMMIT waits 2.5 s: the writer maps its file again and writes.
kill -USR2 "$WS"
kill -CONT "$WS"
for _ in $(seq 100); do
	grep -q "^swapped same" "$T/WS.out" && break
	sleep 0.02
done
grep -q "^swapped same" "$T/WS.out" || fail "3: the writer did not map its file again"
sleep 0.3
h_now=$(mem_state "$H" "$HOLD" $((HOLD + $(numfmt --from=iec $SIZE))))
[ "$h_now" != "$h_freeze" ] || fail "3: the writer wrote nothing after go"
if src wait "$ID" --timeout 60 >"$T/wait.out" 2>&1; then
	fail "3: TORN: the writer wrote the exported memory after the freeze (through a new mapping of its file) and the migration completed: $(grep -c . "$T/wait.out") lines: $(head -n 1 "$T/wait.out")"
fi
grep -qi -- "$CHANGED\|wrote to the exported memory\|cannot tell" "$T/wait.out" ||
	unclear "3: failed, not saying why: $(cat "$T/wait.out")"
info "3 (track-unstopped): refused: $(grep -o "failed: .*" "$T/wait.out" | head -n 1)"
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true
stop_daemons
[ ${#PROBLEMS[@]} -eq 0 ] || fail "${#PROBLEMS[@]} refusals that do not say why: ${PROBLEMS[*]}"
