#!/usr/bin/env bash
# A pre-copy of shared memory written past the tracked mapping: the
# tracker sees only writes through the exported mapping's page-table
# entries, so a page sent in a round and then changed through a second
# mapping of the same file must still reach the destination as it was at
# the freeze, or the migration must be refused saying why: never a
# destination that completes on stale bytes (hashes by memhash,
# independent of the daemon). The workload writes cold pages
# (--bypass-on-usr2 map), which the tracked mapping never writes.
# (A pwrite() to the file is not seen: docs/design.md, "Writes that
# bypass the tracker"; --bypass-on-usr2 pwrite shows it by hand.)
#  3. --track-unstopped: the tracked writer, idle, maps the file a second
#     time after go and writes through it; the COMMIT is held back, and
#     the checks before it must find the mapping.
. "$SRC/tests/lib.sh"
need_root
start_daemons_commit_held 2500
BASE=0x500000000000
SIZE=16M
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec $SIZE))))
RANGE=$(printf '%x-%x' $((BASE)) $((END)))
src() { "$CLIENT" --control "$src_SOCK" "$@"; }
dst() { "$CLIENT" --control "$dst_SOCK" "$@"; }

# bypassed VAR HOW: process VAR wrote past its mapping (--bypass-on-usr2).
bypassed() { usr2_said "$1" "^bypassed $2 [1-9]"; }

# precopy KIND HOW SETTLE: a deferred pre-copy of a KIND workload, ready,
# the bypassing write, SETTLE seconds of paced rounds, go. Sets OUTCOME:
# "equal", or "refused: WHY"; fails on a torn destination.
precopy() {
	local kind=$1 how=$2 settle=$3 h_src h_dst
	start_workload WS source --kind "$kind" --size $SIZE --threads 2 \
		--hot 10 --pace-us 20 --bypass-on-usr2 "$how"
	start_workload WD dest --kind "$kind" --size $SIZE --threads 2
	ID=$(src export "$WS" --range "$RANGE" --deferred --precopy \
		--keep-source) || fail "$kind $how: export failed"
	dst attach "$WD" --from "127.0.0.1:$src_PORT" --id "$ID" \
		--range "$RANGE" >"$T/attach.out" ||
		fail "$kind $how: attach: $(cat "$T/attach.out")"
	precopy_ready src "$ID"
	bypassed WS "$how"
	sleep "$settle"
	rm -f "$T/wait.out"
	if src go "$ID" >"$T/go.out" 2>&1 &&
		dst wait "$ID" --timeout 120 >"$T/wait.out" 2>&1; then
		kill -USR1 "$WD"
		wait_verified WD
		src wait "$ID" --timeout 60 >/dev/null 2>&1 ||
			fail "$kind $how: source side did not complete"
		h_src=$("$MEMHASH" "$WS" $((BASE)) $((END)))
		h_dst=$("$MEMHASH" "$WD" $((BASE)) $((END)))
		[ "$h_src" = "$h_dst" ] ||
			fail "$kind $how: TORN: the destination completed on memory that differs from the source's at its freeze ($h_src, destination $h_dst)"
		OUTCOME="equal: sha256 $h_src"
	else
		# Failed before go, go says only that: the status says why.
		src status "$ID" >>"$T/go.out" 2>&1
		[ ! -f "$T/wait.out" ] || cat "$T/wait.out" >>"$T/go.out"
		OUTCOME="refused: $(grep -o "failed: .*" "$T/go.out" | head -n 1)"
	fi
	kill -9 "$WS" "$WD" 2>/dev/null || true
}

# check_map WHO: OUTCOME is a byte-exact completion or a refusal naming
# the mapping.
check_map() {
	case $OUTCOME in
	equal*) ;;
	refused*"maps the file behind"*"no tracker sees its writes"*) ;;
	*) fail "$1: refused, not saying why: $OUTCOME" ;;
	esac
	info "$1: $OUTCOME"
}

HOLD=$(printf '0x%x' $((BASE + 0x10000000000)))
HRANGE=$(printf '%x-%x' $((HOLD)) $((HOLD + $(numfmt --from=iec $SIZE))))

info "1. memfd: a second mapping, written, while the rounds go on (a round's end looks)"
precopy memfd map 0.5
check_map 1
info "2. memfd: a second mapping, written, just before go (the last round's end, or the checks before the COMMIT)"
precopy memfd map 0
check_map 2
info "3. --track-unstopped: the writer maps its file again elsewhere after go"
# Its mutators idle (a write each 100 s): only the second mapping writes.
tracked_go 3 --kind memfd --size $SIZE --threads 1 --hot 10 \
	--pace-us 100000000 --bypass-on-usr2 map
kill -USR2 "$WS"
kill -CONT "$WS"
for _ in $(seq 100); do
	grep -q "^bypassed map [1-9]" "$T/WS.out" && break
	sleep 0.02
done
grep -q "^bypassed map [1-9]" "$T/WS.out" || fail "3: the writer did not write through a second mapping"
if src wait "$ID" --timeout 60 >"$T/wait.out" 2>&1; then
	fail "3: TORN: the tracked writer wrote the exported file through a mapping no tracker covers, after go, and the migration completed"
fi
grep -q "maps the file behind.*no tracker sees its writes" "$T/wait.out" ||
	fail "3: failed, not saying why: $(cat "$T/wait.out")"
info "3: refused: $(grep -o "failed: .*" "$T/wait.out" | head -n 1)"
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true
stop_daemons
