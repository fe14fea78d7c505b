#!/usr/bin/env bash
# A destination daemon is down; its target A dies, and the pid in A's
# state file comes to name another process: here the target V of a second
# migration, with its userfaultfd at the same fd (A's file is pointed at V,
# checksum made right, as a pid reused by the kernel would look). The start
# time the file keeps for A's target is not V's: the restarted daemon says
# so and leaves V alone, A's migration is not taken up, and V's own
# migration resumes and completes byte-exact. (The old files kept no start
# time: A's migration was restored into V, both writing V's memory.)
. "$SRC/tests/lib.sh"
need_root
start_daemon src --bulk-rate 4M
start_daemon dst
start_workload WS1 source --size 64M --threads 2 --base 0x500000000000
start_workload WS2 source --size 64M --threads 2 --base 0x510000000000
start_workload WD dest --size 64M --threads 4 --pace-us 1500 --prefault --base 0x500000000000
start_workload WV dest --size 64M --threads 4 --pace-us 1500 --prefault --base 0x510000000000
A=$("$CLIENT" --control "$src_SOCK" export "$WS1" --range 500000000000-500004000000)
B=$("$CLIENT" --control "$src_SOCK" export "$WS2" --range 510000000000-510004000000)
src_hash H_B "$WS2" 0x510000000000 0x510004000000
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" --id "$A" \
	--range 500000000000-500004000000 >/dev/null
"$CLIENT" --control "$dst_SOCK" attach "$WV" --from "127.0.0.1:$src_PORT" --id "$B" \
	--range 510000000000-510004000000 >/dev/null
kill -USR1 "$WD" "$WV"
sleep 1.5
for id in "$A" "$B"; do
	"$CLIENT" --control "$dst_SOCK" status "$id" --json | grep -q '"state":"running"' ||
		fail "migration ${id:0:8} not running when the daemon is killed"
done
kill_daemon dst
kill -9 "$WD"
FA=$(state_dir dst)/$A.destination.state
FB=$(state_dir dst)/$B.destination.state
vfd=$(sed -n 's/^target_fd=//p' "$FB")
[ -n "$vfd" ] || fail "no target_fd in $FB"
sed -i -e "s/^pid=.*/pid=$WV/" -e "s/^target_fd=.*/target_fd=$vfd/" "$FA"
state_resum "$FA"
info "A's file now names process $WV (fd $vfd), target of B"
restart_daemon dst
grep -q "pid $WV now names another process (started at tick [0-9]*, the target at [0-9]*)" "$T/dst.log" ||
	fail "no word of the pid naming another process: $(tail -n 8 "$T/dst.log")"
grep -q "restored migration ${A:0:8}" "$T/dst.log" && fail "A's migration was restored into process $WV"
[ ! -e "$FA" ] || fail "A's state file is still there"
grep -q "restored migration ${B:0:8}.* into process $WV" "$T/dst.log" ||
	fail "B's migration was not restored: $(tail -n 8 "$T/dst.log")"
info "refused: $(grep -o "pid $WV now names another process.*" "$T/dst.log")"
"$CLIENT" --control "$dst_SOCK" wait "$B" --timeout 300 >"$T/wait.out" ||
	fail "B: $(cat "$T/wait.out")"
wait_verified WV
[ "$(dst_hash H_B "$WV" 0x510000000000 0x510004000000)" = "$H_B" ] ||
	fail "process $WV differs from B's source"
info "B complete, byte-exact; process $WV got nothing of A's"
