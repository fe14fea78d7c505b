#!/usr/bin/env bash
# build: plain sanitized
# A target that reads its memory in order while it migrates (the
# workload's --touch scan: one word of every page) catches up with the
# bulk stream and faults, frame after frame, on a page of the frame being
# installed or of the next one. Such a fault is left to the stream, which
# brings the page no later than an answer would: the destination asks the
# source for far fewer pages than its target waited on (before, one
# request a fault), and every page still arrives byte for byte; the bulk
# lane's hold for one request never starves the stream. A page
# left to the stream that does not come is asked for after twice the
# stream's pace (1 ms at most); a stream held to a trickle (--bulk-rate)
# is not waited for: a second scan over one must be asked for.
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
BASE=0x500000000000
key() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }

# scan SIZE DAEMON [KIND UNTOUCHED]: one migration from DAEMON to dst,
# scanned (anonymous memory with no page left untouched by default); sets
# FAULTS (the destination's), ASKED (the source's requests), LEFT (left
# to the stream, from the destination's log).
scan() {
	local size=$1 from=$2 kind=${3:-anon} every=${4:-0} end range sock port
	sock=${from}_SOCK port=${from}_PORT
	end=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$size"))))
	range=$(printf '%x-%x' $((BASE)) $((end)))
	start_workload WS source --kind "$kind" --size "$size" --threads 1 \
		--untouched-every "$every" --base "$BASE"
	start_workload WD dest --kind "$kind" --size "$size" --touch scan \
		--untouched-every "$every" --base "$BASE"
	# As on two hosts: the source on a CPU of its own, the destination
	# daemon beside its target (a scanner catches up with the stream
	# there at every frame; unpinned, where it lands decides).
	if [ "$(nproc)" -ge 2 ]; then
		for p in $(daemon_pids "$from") "$WS"; do taskset -a -p -c 1 "$p" >/dev/null; done
		for p in $(daemon_pids dst) "$WD"; do taskset -a -p -c 0 "$p" >/dev/null; done
	fi
	ID=$("$CLIENT" --control "${!sock}" export "$WS" --range "$range") ||
		fail "export failed"
	src_hash H_SRC "$WS" "$BASE" "$end"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:${!port}" \
		--id "$ID" --range "$range" >"$T/attach.out" 2>&1 ||
		fail "attach: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" ||
		fail "wait: $(cat "$T/wait.out")"
	"$CLIENT" --control "${!sock}" wait "$ID" --timeout 60 >/dev/null ||
		fail "source side did not complete"
	for _ in $(seq 600); do
		grep -q '^touched' "$T/WD.out" && break
		sleep 0.05
	done
	grep -q '^touched' "$T/WD.out" || fail "the scanner did not finish: $(cat "$T/WD.log")"
	[ "$(dst_hash H_SRC "$WD" "$BASE" "$end" --zero-absent)" = "$H_SRC" ] ||
		fail "destination differs from the source"
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/dst.json"
	"$CLIENT" --control "${!sock}" status "$ID" --json >"$T/src.json"
	FAULTS=$(key "$T/dst.json" demand_faults)
	ASKED=$(key "$T/src.json" demand_faults)
	LEFT=$(grep "migration ${ID:0:8}.*every page in" "$T/dst.log" |
		sed -n 's/.* \([0-9]*\) of them left to the bulk stream.*/\1/p')
	LATE=$(grep "migration ${ID:0:8}.*every page in" "$T/dst.log" |
		sed -n 's/.* \([0-9]*\) asked for when it did not.*/\1/p')
	[ -n "$LEFT" ] && [ -n "$LATE" ] ||
		fail "the destination's log does not say what it left to the stream"
	info "$size from $from: scanner $(grep '^touched' "$T/WD.out"); $FAULTS faults, $LEFT brought by the stream unasked, $LATE asked for late, $ASKED asked for in all; sha256 equal"
	kill -9 "$WS" "$WD" 2>/dev/null || true
	wait "$WS" "$WD" 2>/dev/null || true
	for p in $(daemon_pids "$from") $(daemon_pids dst); do
		taskset -a -p -c "0-$(($(nproc) - 1))" "$p" >/dev/null
	done
}

scan 256M src
[ "$FAULTS" -ge 50 ] || fail "the scanner caught up with the stream only $FAULTS times: nothing measured"
# A reader that faults again as soon as it is answered, from the start,
# once held the bulk lane for good (one request in flight at a time):
# every page came on demand. The stream must bring most.
[ "$FAULTS" -lt 16384 ] || fail "$FAULTS faults for 65536 pages: the bulk stream was starved"
[ "$LEFT" -gt 0 ] || fail "no fault was left to the stream ($FAULTS faults)"
[ $((ASKED * 2)) -lt "$FAULTS" ] ||
	fail "the source was asked for $ASKED pages of $FAULTS faults: not left to the stream"

# Shared memory with a page in 4 never written: the stream's ZERO runs
# there install nothing, but a page a thread waits on, left to the
# stream or asked for, must be (a left page once stayed none, its thread
# asleep until the migration ended).
scan 64M src memfd 4
[ "$LEFT" -gt 0 ] || fail "memfd: no fault was left to the stream ($FAULTS faults)"

# A stream of 4 MiB/s: the scanner outruns it at once, its faults left to
# the stream at first, and asked for once they are late.
start_daemon srcslow --bulk-rate 4M
scan 16M srcslow
[ "$ASKED" -gt 0 ] || fail "a trickling stream: nothing was asked for ($FAULTS faults, $LEFT left)"
stop_daemons
