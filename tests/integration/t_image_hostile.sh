#!/usr/bin/env bash
# Images a hostile client hands the daemon (security review, findings 4
# and 5), replayed against running daemons.
# (a) Crafted regions, every checksum right (tests/hostile-image.py): a
# hole of 2^62 bytes, a region that ends past 2^47, one whose end wraps.
# export --image and attach --image refuse each, saying why, with the
# target untouched; the daemons serve the next requests (a good image
# exported, and restored byte for byte). A legal zero run of 2^28 pages in
# a private file mapping is taken at once (its bits set a word at a time).
# (b) A 1 GiB sparse image whose tables have a wrong checksum, handed
# again and again to both daemons of a running migration (export --image
# to its source, attach --image to its destination): each refused with
# the checksum error, while the migration's demand faults are as fast as
# in a baseline run without them (p99), and status requests are answered
# at once: the image is checked off the event loop.
. "$SRC/tests/lib.sh"
need_root
HOSTILE=$SRC/tests/hostile-image.py
BASE=0x500000000000

# stopped VAR: stops the workload and waits until it is (state T).
stopped() {
	kill -STOP "${!1}"
	for _ in $(seq 100); do
		[ "$(proc_state "${!1}")" = T ] && return
		sleep 0.02
	done
	fail "workload $1 did not stop"
}

# The source daemon's bulk lane is slow, so that (b)'s target faults
# most of the pages it touches.
start_daemon s --bulk-rate 1M
start_daemon d

# (a) Crafted regions.
python3 "$HOSTILE" region $BASE $((1 << 62)) hole "$T/hole62.img"
python3 "$HOSTILE" region 0x7ffffff00000 0x200000 hole "$T/past47.img"
# 0x7fff00000000 + 0xffff800100001000 = 2^64 + 0x1000: the end wraps.
python3 "$HOSTILE" region 0x7fff00000000 0xffff800100001000 hole "$T/wrap.img"
start_workload WT dest --size 8M --prefault --untouched-every 7 --zero-every 5
END8=$(printf '0x%x' $((BASE + 8 * 1048576)))
h_before=$("$MEMHASH" "$WT" "$BASE" "$END8")
for img in hole62 past47 wrap; do
	expect_error "export --image $img" "not inside the user address space" \
		"$CLIENT" --control "$s_SOCK" export --image "$T/$img.img"
	expect_error "attach --image $img" "not inside the user address space" \
		"$CLIENT" --control "$d_SOCK" attach "$WT" --image "$T/$img.img"
done
! grep -q 'anon_inode:\[userfaultfd\]' <(ls -l "/proc/$WT/fd") ||
	fail "a refused attach left a userfaultfd in the target"
[ "$("$MEMHASH" "$WT" "$BASE" "$END8")" = "$h_before" ] ||
	fail "a refused attach changed the target's memory"
kill -0 "$s_PID" 2>/dev/null || fail "daemon s died of a crafted image"
kill -0 "$d_PID" 2>/dev/null || fail "daemon d died of a crafted image"

# Bounded and legal: 1 TiB of a private file mapping, all zero pages
# (data on the wire: its bits are set).
python3 "$HOSTILE" region $BASE $((1 << 40)) zero "$T/zero1t.img" 6
t0=$(date +%s%N)
ID=$("$CLIENT" --control "$s_SOCK" export --image "$T/zero1t.img") ||
	fail "export --image of a 2^28-page zero run: $ID"
info "a zero run of 2^28 pages in a private file mapping: exported as ${ID:0:8} in $((($(date +%s%N) - t0) / 1000000)) ms"

# The daemons serve on: a good image, exported and restored.
start_workload WS source --size 8M --untouched-every 7 --zero-every 5
stopped WS
"$CLIENT" --control "$s_SOCK" snapshot "$WS" --to "$T/good.img" --keep-source \
	--range "${BASE#0x}-${END8#0x}" >"$T/snap.out" 2>&1 ||
	fail "snapshot after crafted images: $(cat "$T/snap.out")"
H_SRC=$("$MEMHASH" "$WS" "$BASE" "$END8")
kill -9 "$WS"
ID=$("$CLIENT" --control "$s_SOCK" export --image "$T/good.img") ||
	fail "export --image after crafted images: $ID"
"$CLIENT" --control "$d_SOCK" attach "$WT" --image "$T/good.img" \
	--range "${BASE#0x}-${END8#0x}" --wait >"$T/attach.out" 2>&1 ||
	fail "attach --image after crafted images: $(cat "$T/attach.out")"
[ "$("$MEMHASH" "$WT" "$BASE" "$END8")" = "$H_SRC" ] ||
	fail "the restore after crafted images differs from the process"
kill -9 "$WT"
info "after them: a good image exported (${ID:0:8}) and restored byte for byte"

# (b) A 1 GiB sparse image with a wrong tables checksum.
python3 "$HOSTILE" sparse $((1 << 30)) "$T/sparse.img"
info "sparse image: $(stat -c %s "$T/sparse.img") bytes, $(($(stat -c %b "$T/sparse.img") * 512)) on disk"

# hostile NAME CMD...: CMD again and again until $T/stop exists, each
# answer and its time to $T/NAME.hostile; the client running now in
# $T/NAME.client (hostile_stop kills it).
hostile() {
	local name=$1 t0 rc pid
	shift
	while [ ! -e "$T/stop" ]; do
		t0=$(date +%s%N)
		"$@" >"$T/$name.hostile.out" 2>&1 &
		pid=$!
		echo "$pid" >"$T/$name.client"
		rc=0
		wait "$pid" || rc=$?
		echo "$((($(date +%s%N) - t0) / 1000000)) ms rc $rc: $(head -n 1 "$T/$name.hostile.out")" \
			>>"$T/$name.hostile"
	done
}

# hostile_stop: the loops end, their clients killed mid-request: the
# daemons go on checking for no one.
hostile_stop() {
	local name
	touch "$T/stop"
	while kill -0 "${HPIDS[@]}" 2>/dev/null; do
		for name in export attach; do
			kill "$(cat "$T/$name.client")" 2>/dev/null || true
		done
		sleep 0.1
	done
	wait "${HPIDS[@]}" 2>/dev/null || true
}

# refused NAME: every request of $T/NAME.hostile answered (none killed)
# was refused with the checksum error; how many were, in N.
refused() {
	N=$(grep -c ' rc 1: ' "$T/$1.hostile" || true)
	if grep -v ' rc 143: ' "$T/$1.hostile" |
		grep -v 'rc 1: .*region table or page index checksum mismatch'; then
		fail "$1 --image of the sparse image: an answer not the checksum error"
	fi
}

# status_pings NAME: STATUS requests to daemon s on one connection, one
# each 10 ms, each round trip's time (us) to $T/NAME.pings, until
# $T/NAME.stop exists.
status_pings() {
	python3 - "$s_SOCK" "$T/$1.pings" "$T/$1.stop" <<'PY'
import os, socket, struct, sys, time
sock, out, stop = sys.argv[1:]
s = socket.socket(socket.AF_UNIX)
s.connect(sock)
def recv(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            sys.exit("the daemon closed the control connection")
        b += c
    return b
with open(out, "w") as f:
    while not os.path.exists(stop):
        t0 = time.monotonic_ns()
        s.sendall(struct.pack(">HHII", 104, 0, 0, 0))  # STATUS, empty
        typ, _, mlen, dlen = struct.unpack(">HHII", recv(12))
        recv(mlen + dlen)
        if typ != 105:
            sys.exit("status: frame type %d" % typ)
        print((time.monotonic_ns() - t0) // 1000, file=f, flush=True)
        time.sleep(0.01)
PY
}

# touch_run NAME: a migration from s to d of 128 MiB whose target touches
# 3000 random pages one at a time, each fault timed; FAULTS, P50, P99
# (us) and MAX (ms) from the toucher; meanwhile status_pings NAME, its
# p99 and max in SP99 and SMAX (ms). 1 GiB past BASE, away from (a)'s
# regions.
TBASE=$((BASE + (1 << 30)))
TEND=$(printf '0x%x' $((TBASE + 128 * 1048576)))
touch_run() {
	local name=$1 range
	range=$(printf '%x-%x' "$TBASE" "$TEND")
	mkdir -p "$T/lat-$name"
	start_workload WS source --size 128M --base "$TBASE" --threads 1 --untouched-every 0
	WORKLOAD_LAT_DIR=$T/lat-$name start_workload WD dest --size 128M --base "$TBASE" \
		--touch 3000
	ID=$("$CLIENT" --control "$s_SOCK" export "$WS" --range "$range") || fail "export: $ID"
	"$CLIENT" --control "$d_SOCK" attach "$WD" --from "127.0.0.1:$s_PORT" --id "$ID" \
		--range "$range" >"$T/attach.out" 2>&1 || fail "attach: $(cat "$T/attach.out")"
	status_pings "$name" &
	local pp=$!
	for _ in $(seq 200); do
		[ -s "$T/$name.pings" ] && break
		sleep 0.05
	done
	kill -USR1 "$WD"
	for _ in $(seq 1200); do
		grep -q '^touched' "$T/WD.out" && break
		sleep 0.05
	done
	touch "$T/$name.stop"
	wait "$pp" || fail "$name: status requests failed"
	read -r _ _ _ FAULTS _ P50 _ P99 < <(grep '^touched' "$T/WD.out") ||
		fail "$name: the toucher printed nothing: $(cat "$T/WD.log")"
	MAX=$(awk '$1 != "-" && $1 > m {m = $1} END {printf "%.1f", m / 1e6}' "$T/lat-$name"/*.lat)
	read -r SN SMAX SP99 < <(sort -n "$T/$name.pings" |
		awk '{v[NR] = $1} END {printf "%d %.1f %.1f\n", NR, v[NR] / 1e3, v[int((NR - 1) * 0.99) + 1] / 1e3}')
	[ "$SN" -ge 20 ] || fail "$name: only $SN status requests answered"
	info "$name: $FAULTS demand faults: p50 $P50 us, p99 $P99 us, max $MAX ms; $SN status requests: p99 $SP99 ms, max $SMAX ms"
	kill -9 "$WD" "$WS"
}

start_workload WT dest --size 8M --prefault
# Refused, and said why: one of each, to the end, with nothing else on.
rm -f "$T/stop"
hostile export "$CLIENT" --control "$s_SOCK" export --image "$T/sparse.img" &
HPIDS=($!)
hostile attach "$CLIENT" --control "$d_SOCK" attach "$WT" --image "$T/sparse.img" &
HPIDS+=($!)
on_cleanup "touch $T/stop; kill ${HPIDS[*]} 2>/dev/null; wait ${HPIDS[*]} 2>/dev/null"
for _ in $(seq 6000); do
	[ -s "$T/export.hostile" ] && [ -s "$T/attach.hostile" ] && break
	sleep 0.1
done
hostile_stop
for name in export attach; do
	refused "$name"
	[ "$N" -ge 1 ] || fail "$name --image of the sparse image: no answer in 600 s"
	info "$name --image of the sparse image: $(head -n 1 "$T/$name.hostile")"
done
: >"$T/export.hostile"
: >"$T/attach.hostile"

# Rounds of a baseline and a run while both daemons are handed the
# sparse image back to back (the target of the attaches: WT), in turn, so
# that load from elsewhere on the machine falls on both alike.
B_P99=0 B_SP99=0 H_P99='' H_SP99=''
for round in 1 2 3; do
	touch_run "baseline$round"
	awk -v a="$P99" -v b="$B_P99" 'BEGIN {exit !(a > b)}' && B_P99=$P99
	awk -v a="$SP99" -v b="$B_SP99" 'BEGIN {exit !(a > b)}' && B_SP99=$SP99

	rm -f "$T/stop"
	hostile export "$CLIENT" --control "$s_SOCK" export --image "$T/sparse.img" &
	HPIDS=($!)
	hostile attach "$CLIENT" --control "$d_SOCK" attach "$WT" --image "$T/sparse.img" &
	HPIDS+=($!)
	on_cleanup "touch $T/stop; kill ${HPIDS[*]} 2>/dev/null; wait ${HPIDS[*]} 2>/dev/null"
	# Both daemons busy with the image before the faults start.
	sleep 1
	touch_run "hostile$round"
	[ -z "$H_P99" ] || awk -v a="$P99" -v b="$H_P99" 'BEGIN {exit !(a < b)}' && H_P99=$P99
	[ -z "$H_SP99" ] || awk -v a="$SP99" -v b="$H_SP99" 'BEGIN {exit !(a < b)}' && H_SP99=$SP99
	[ "$round" = 3 ] || hostile_stop
done
refused export
refused attach
# Not worse than without: the better run with the sparse image against
# the worse without, within twice it and 2 ms of noise; status under
# 50 ms (or that bound, on a machine loaded enough that the baseline is
# slower). A loop held by the check holds the fault or request that
# comes meanwhile for the check's time: seconds.
awk -v h="$H_SP99" -v b="$B_SP99" 'BEGIN {exit !(h < 50 || h <= 2 * b)}' ||
	fail "status requests waited: p99 $H_SP99 ms with the sparse image, $B_SP99 ms without"
awk -v h="$H_P99" -v b="$B_P99" 'BEGIN {exit !(h <= 2 * b + 2000)}' ||
	fail "demand fault p99 $H_P99 us with the sparse image against $B_P99 us without"
info "demand fault p99: $B_P99 us without (the worse round), $H_P99 us while the sparse image was handed over again and again (the better); status p99 $B_SP99 ms and $H_SP99 ms"

# SIGTERM while both daemons still check it (for clients gone): they
# stop, joined, nothing leaked (LeakSanitizer, stop_daemon's checks).
hostile_stop
threads="$(ls "/proc/$s_PID/task" | wc -l) and $(ls "/proc/$d_PID/task" | wc -l)"
t0=$(date +%s%N)
stop_daemon s
stop_daemon d
info "both daemons ($threads threads) stopped cleanly in $((($(date +%s%N) - t0) / 1000000)) ms, sparse images still being checked"
