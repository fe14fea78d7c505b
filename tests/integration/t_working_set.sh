#!/usr/bin/env bash
# The working set of a restore (issue 22 stage 3). A workload is
# snapshotted (--keep-source: tests/memhash hashes it as taken), restored
# by a daemon whose bulk stream is slowed down (--bulk-rate), into a target
# that touches a fixed random subset of its pages: most are demand faults,
# recorded with attach --record-working-set and stored in the image
# (format 2, image info shows it). A second restore sends those pages
# first; its target, let go once they are in, faults on far fewer pages.
# Both restores are byte-exact. A working-set section that is corrupted
# is refused with what is wrong, by image check and attach alike, and
# changes nothing; a version 1 image takes no working set it cannot hold.
# The image is read ahead through io_uring; read with pread, the same.
. "$SRC/tests/lib.sh"
need_root
BASE=0x500000000000
SIZE=32M
TOUCH=2000
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$SIZE"))))
RANGE=${BASE#0x}-${END#0x}
IMG=$T/ws.img

start_daemon d --bulk-rate 4M
start_workload WS source --size "$SIZE" --threads 2 --untouched-every 0
kill -STOP "$WS"
sleep 0.2
"$CLIENT" --control "$d_SOCK" snapshot "$WS" --to "$IMG" --keep-source \
	--range "$RANGE" >"$T/snap.out" 2>&1 || fail "snapshot: $(cat "$T/snap.out")"
H_SRC=$("$MEMHASH" "$WS" "$BASE" "$END")
kill -9 "$WS"
"$CLIENT" image info "$IMG" | grep -q '^working set: none' || fail "a new image has a working set"

# [D=DAEMON] restore ARGS...: restores into target WD (touching TOUCH pages), the
# attach's output in $T/attach.out; FAULTS its demand faults. With
# PREFETCHED=P, the target is let go once P pages are prefetched.
restore() {
	local ap h
	start_workload WD dest --size "$SIZE" --touch "$TOUCH" --untouched-every 0
	local sock=${D:-d}_SOCK
	sock=${!sock}
	"$CLIENT" --control "$sock" attach "$WD" --image "$IMG" --range "$RANGE" \
		"$@" --wait >"$T/attach.out" 2>&1 &
	ap=$!
	for _ in $(seq 600); do
		grep -q '^attached' "$T/attach.out" && break
		kill -0 "$ap" 2>/dev/null || break
		sleep 0.05
	done
	grep -q '^attached' "$T/attach.out" || fail "attach: $(cat "$T/attach.out")"
	if [ -n "${PREFETCHED:-}" ]; then
		id=$("$CLIENT" --control "$sock" status --json | python3 -c '
import json, sys
for m in json.load(sys.stdin):
    if m["role"] == "destination" and m["pid"] == '"$WD"':
        print(m["id"])')
		for _ in $(seq 600); do
			p=$("$CLIENT" --control "$sock" status "$id" | awk '/^  prefetched/ {print $2; exit}')
			[ "${p:-0}" -ge "$PREFETCHED" ] && break
			sleep 0.05
		done
		info "target let go with ${p:-0} pages prefetched"
	fi
	kill -USR1 "$WD"
	wait "$ap" || fail "restore: $(cat "$T/attach.out")"
	grep -q '^touched' "$T/WD.out" || {
		sleep 1
		grep -q '^touched' "$T/WD.out"
	} || fail "the target did not touch its pages: $(cat "$T/WD.out")"
	h=$("$MEMHASH" "$WD" "$BASE" "$END")
	[ "$h" = "$H_SRC" ] || fail "the target differs from the process snapshotted"
	FAULTS=$(awk '/^touched/ {print $4}' "$T/WD.out")
	kill -9 "$WD"
}

restore --record-working-set --ws-secs 6
grep -q '^working set: [0-9]* pages' "$T/attach.out" || fail "no working set stored: $(cat "$T/attach.out")"
F1=$FAULTS
"$CLIENT" image info "$IMG" >"$T/info" || fail "image info: $(cat "$T/info")"
grep -q '^image .*: format 2' "$T/info" || fail "not format 2: $(head -n 1 "$T/info")"
WSP=$(awk '/^working set:/ {print $3}' "$T/info")
[ "${WSP:-0}" -ge $((F1 / 2)) ] || fail "working set of ${WSP:-0} pages for $F1 faults"
info "first restore: $F1 demand faults of $TOUCH touches; working set $WSP pages stored"

PREFETCHED=$WSP restore
F2=$FAULTS
# The set's pages are all in before the target goes on, so it faults only
# on pages the recording did not see (on a loaded machine its time limit
# ends it before the target is through), and on a few more.
[ "$F2" -le $((F1 - WSP + F1 / 10)) ] ||
	fail "second restore: $F2 demand faults against $F1 first, $WSP of them in the set"
info "second restore, working set first: $F2 demand faults (first: $F1), byte for byte"
# Every page of the set was sent in its turn or found sent already.
"$CLIENT" --control "$d_SOCK" metrics >"$T/metrics.txt" || fail "metrics: $(cat "$T/metrics.txt")"
ahead=$(sed -n 's/^uffdd_working_set_pages_total{outcome="ahead"} //p' "$T/metrics.txt")
late=$(sed -n 's/^uffdd_working_set_pages_total{outcome="late"} //p' "$T/metrics.txt")
[ "${ahead:-0}" -gt 0 ] && [ $((ahead + late)) = "$WSP" ] ||
	fail "working-set metrics: ahead ${ahead:-none}, late ${late:-none}, the set $WSP pages"
info "working-set pages: $ahead sent ahead of the faults, $late late"

# The reads ahead went through io_uring; a daemon told to read with pread
# (what it falls back to without io_uring) restores byte for byte too.
grep -q 'read with pread' "$T/d.log" && fail "io_uring was not used: $(grep 'read with pread' "$T/d.log")"
UFFDD_TEST_IMAGE_IO=pread start_daemon p --bulk-rate 4M
PREFETCHED=$WSP D=p restore
grep -q 'read with pread (UFFDD_TEST_IMAGE_IO' "$T/p.log" || fail "the pread daemon did not say so"
info "third restore, read with pread: $FAULTS demand faults, byte for byte"

# A corrupted working set: refused with what is wrong, nothing changed.
cp "$IMG" "$T/bad.img"
len=$(stat -c %s "$T/bad.img")
flip_byte "$T/bad.img" $((len - 20))
if checked "$T/out" "$CLIENT" image check "$T/bad.img"; then fail "a corrupted working set passed image check"; fi
grep -q 'working set: index checksum mismatch' "$T/out" || fail "image check: $(cat "$T/out")"
cp "$IMG" "$T/bad2.img"
ws_off=$(python3 -c 'import struct,sys; b=open(sys.argv[1],"rb").read(176); print(struct.unpack_from("<Q", b, 152)[0])' "$T/bad2.img")
flip_byte "$T/bad2.img" $((ws_off + 100))
if checked "$T/out" "$CLIENT" image check "$T/bad2.img"; then fail "a corrupted working-set page passed image check"; fi
grep -q 'checksum mismatch in working-set page' "$T/out" || fail "image check: $(cat "$T/out")"
start_workload WD dest --size "$SIZE" --untouched-every 0 --prefault
before=$(mem_state "$WD" "$BASE" "$END")
if checked "$T/out" "$CLIENT" --control "$d_SOCK" attach "$WD" --image "$T/bad.img" --range "$RANGE"; then
	fail "attach from a corrupted working set succeeded"
fi
grep -q 'working set' "$T/out" || fail "attach: $(cat "$T/out")"
[ "$(mem_state "$WD" "$BASE" "$END")" = "$before" ] || fail "a refused attach changed the target"
kill -9 "$WD"
info "a corrupted working set is refused: $(head -n 1 "$T/out")"

# Options that make no sense are refused before anything is asked.
if checked "$T/out" "$CLIENT" --control "$d_SOCK" attach 1 --from 127.0.0.1:1 --id 0123456789abcdef0123456789abcdef \
	--record-working-set; then fail "--record-working-set without --image"; fi
if checked "$T/out" "$CLIENT" --control "$d_SOCK" attach 1 --image "$IMG" --ws-secs 3; then
	fail "--ws-secs without --record-working-set"
fi
