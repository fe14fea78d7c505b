#!/usr/bin/env bash
# A pre-copy of shared memory whose writes bypass the tracked mapping:
# the tracker sees only writes through the exported mapping's page-table
# entries, so a page sent in a round and then changed through the file
# (pwrite() on its descriptor) or through a second mapping of it must
# still reach the destination as it was at the freeze, or the migration
# must be refused saying why: never a destination that completes on
# stale bytes (hashes by memhash, independent of the daemon). The
# workload writes cold pages (--bypass-on-usr2), which the tracked
# mapping never writes, so only a look past the tracker sends them again.
#  1. memfd, pwrite() while ready (paced rounds go on), then go.
#  2. tmpfs file, pwrite() just before go (the freeze's look).
#  3. memfd, a second shared mapping of it elsewhere in the process,
#     written and kept: refused (or, if it completes, equal).
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
BASE=0x500000000000
SIZE=16M
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec $SIZE))))
RANGE=$(printf '%x-%x' $((BASE)) $((END)))
src() { "$CLIENT" --control "$src_SOCK" "$@"; }
dst() { "$CLIENT" --control "$dst_SOCK" "$@"; }

# bypassed VAR HOW: process VAR wrote past its mapping (--bypass-on-usr2).
bypassed() {
	kill -USR2 "${!1}"
	for _ in $(seq 100); do
		grep -q "^bypassed $2 [1-9]" "$T/$1.out" && return
		sleep 0.02
	done
	fail "workload $1 did not write past its mapping: $(cat "$T/$1.log")"
}

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
	for _ in $(seq 300); do
		src status "$ID" --json | grep -q '"precopy_ready":true' && break
		sleep 0.1
	done
	src status "$ID" --json | grep -q '"precopy_ready":true' ||
		fail "$kind $how: pre-copy never ready"
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

info "1. memfd: pwrite() to cold pages while the paced rounds go on, then go"
precopy memfd pwrite 0.5
case $OUTCOME in equal*) ;; *) fail "1: $OUTCOME" ;; esac
grep -q "changed other than through the tracked mappings" "$T/src.log" ||
	fail "1: the source did not say the file changed past the tracker"
info "1: $OUTCOME"

info "2. tmpfs: pwrite() to cold pages just before go (the freeze's look)"
precopy tmpfs pwrite 0
case $OUTCOME in equal*) ;; *) fail "2: $OUTCOME" ;; esac
info "2: $OUTCOME"

info "3. memfd: written through a second mapping outside the exported range"
precopy memfd map 0.5
case $OUTCOME in
equal*) ;;
refused*"maps the file behind"*"no tracker sees its writes"*) ;;
*) fail "3: refused, not saying why: $OUTCOME" ;;
esac
info "3: $OUTCOME"
stop_daemons
