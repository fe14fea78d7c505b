#!/usr/bin/env bash
# The destination installs bulk frames on a thread of its own, below the
# event loop (daemon/dest/installer.c). What that thread must never do is
# put the source's bytes into a page the target dropped after the frame
# was planned: once the daemon has read the drop's event the kernel zaps
# the page, and an install after that would stay. The target drops one
# page in 4 of 128 MiB, one madvise each, in a scattered order, while the
# bulk stream installs around them, and reads each back at once: every
# one must read as zeros, then and when every page is checked. The same
# with the installer off (--bulk-installer no: the event loop installs),
# and the thread's part is seen in the log. Byte for byte, the rest is
# the source's (the target checks its pattern; hashes of a migration
# without drops compared independently).
. "$SRC/tests/lib.sh"
need_root
n=0
# one DEST-DAEMON-ARGS...: a migration whose target storms.
one() {
	local base end range id
	n=$((n + 1))
	base=$((0x500000000000 + n * 0x100000000))
	end=$((base + (128 << 20)))
	range=$(printf '%x-%x' "$base" "$end")
	start_workload WS source --size 128M --threads 1 --base "$base"
	start_workload WD dest --size 128M --threads 4 --base "$base" --event remove-storm
	id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range")
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$id" --range "$range" >/dev/null
	kill -USR1 "$WD"
	checked "$T/wait.out" "$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 120 ||
		fail "$*: $(cat "$T/wait.out")"
	wait_verified WD >/dev/null
	grep -q '^storm: 0 pages' "$T/WD.out" ||
		fail "$*: $(grep '^storm' "$T/WD.out")"
	info "$*: $(grep '^storm' "$T/WD.out"); $(grep '^verified' "$T/WD.out"); $(frames) bulk frames by the thread"
	kill "$WD" "$WS" 2>/dev/null
}
# frames: the bulk frames the installer thread took in the destination's
# last migration (the loop takes a frame itself when no fault came
# lately and the thread holds none).
frames() {
	grep "every page in" "$T/dst.log" | tail -n 1 |
		sed -n 's/.*; \([0-9]*\) bulk frames by the installer thread.*/\1/p'
}
start_daemon src
start_daemon dst
one "installer thread"
grep -q "bulk installer: a thread 10 nice levels below" "$T/dst.log" ||
	fail "the destination did not start its bulk installer"
[ "$(frames)" -gt 0 ] || fail "the storm's migration gave the thread no frame"
# since_start: the destination's log since it was last started.
since_start() { tail -n "+$((from + 1))" "$T/dst.log"; }
stop_daemon dst
from=$(wc -l <"$T/dst.log")
start_daemon dst --bulk-installer no
one "installer off"
! since_start | grep -q "bulk installer: a thread" ||
	fail "--bulk-installer no started the thread"
[ "$(frames)" = 0 ] || fail "--bulk-installer no: $(frames) frames went to a thread"
# A migration's memory, hashed apart from the daemon, with the thread (the
# target's checking threads fault, so frames go to it).
stop_daemon dst
from=$(wc -l <"$T/dst.log")
start_daemon dst --bulk-installer-nice 19
base=$((0x600000000000))
end=$((base + (256 << 20)))
range=$(printf '%x-%x' "$base" "$end")
start_workload WS source --size 256M --threads 1 --base "$base"
start_workload WD dest --size 256M --threads 2 --base "$base"
id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range")
src_hash h_src "$WS" "$base" "$end"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$id" --range "$range" >/dev/null
kill -USR1 "$WD"
checked "$T/wait.out" "$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 120 ||
	fail "256M: $(cat "$T/wait.out")"
wait_verified WD >/dev/null
[ "$(dst_hash h_src "$WD" "$base" "$end")" = "$h_src" ] ||
	fail "256M: the destination differs from the source"
since_start | grep -q "bulk installer: a thread 19 nice levels below" ||
	fail "--bulk-installer-nice 19 not taken"
[ "$(frames)" -gt 0 ] || fail "256M: the thread took no frame"
info "256M migration byte-exact with the thread at nice +19 ($(frames) frames by it)"
kill "$WD" "$WS" 2>/dev/null

# The installer turned off and on again by SIGHUP while the stream flows
# (bulk-installer is reloadable). The lane reads each frame into the
# buffer its installer named; a frame read into the thread's buffer and
# then taken by the loop's installer must be taken from where it was
# read (conn_set_sink() moves only the frames after it). Wrong bytes in
# one frame show in the hashes. The target's two checking threads read a
# page every 150 us each, so faults come all along and frames go to the
# thread.
stop_daemon dst
stop_daemon src
start_daemon src --bulk-rate 24M
echo "bulk-installer yes" >"$T/inst.conf"
start_daemon dst --config "$T/inst.conf"
base=$((0x680000000000))
end=$((base + (192 << 20)))
range=$(printf '%x-%x' "$base" "$end")
start_workload WS source --size 192M --threads 1 --base "$base"
start_workload WD dest --size 192M --threads 2 --pace-us 150 --base "$base"
id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range")
src_hash h_src "$WS" "$base" "$end"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$id" --range "$range" >/dev/null
kill -USR1 "$WD"
reloads=0
for v in no yes no yes; do
	sleep 1.2
	echo "bulk-installer $v" >"$T/inst.conf"
	kill -HUP "$dst_PID"
	reloads=$((reloads + 1))
	wait_log dst "reloaded" "$reloads"
done
"$CLIENT" --control "$dst_SOCK" status "$id" | grep -q "state *running" ||
	fail "reloads: the migration ended before the last reload (the test proves nothing)"
checked "$T/wait.out" "$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 120 ||
	fail "reloads: $(cat "$T/wait.out")"
wait_verified WD >/dev/null
[ "$(dst_hash h_src "$WD" "$base" "$end")" = "$h_src" ] ||
	fail "reloads: the destination differs from the source after the installer was switched off and on"
[ "$(frames)" -gt 0 ] || fail "reloads: the thread took no frame"
info "192M at 24 MiB/s byte-exact across 4 reloads switching the installer ($(frames) frames by the thread)"
