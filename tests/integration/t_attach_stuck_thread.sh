#!/usr/bin/env bash
# A target one of whose threads cannot stop: it called vfork() and waits in
# the kernel, where neither a signal nor ptrace reaches it, for a child that
# sleeps. The attach must stop every thread before it takes the target's
# memory; it gives up after 10 s with a clear error, the daemon goes on
# serving, and once the child is gone the thread is let go: nothing of the
# target is left traced, stopped or registered. (The daemon waited for that
# thread for good, and with it every migration it served.)
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
A=0x500000000000
start_workload WS source --size 16M --threads 1 --base $A
start_workload WD dest --size 16M --threads 2 --base $A --stuck-thread
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000)
child=
for _ in $(seq 50); do
	child=$(pgrep -P "$WD" | head -n 1)
	[ -n "$child" ] && break
	sleep 0.1
done
[ -n "$child" ] || fail "the target's vfork child did not appear"
PIDS+=("$child")
rc=0
checked "$T/out" timeout 60 "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" || rc=$?
[ "$rc" != 124 ] || fail "attach still waiting after 60 s"
[ "$rc" != 0 ] || fail "attach succeeded with a thread that cannot stop: $(cat "$T/out")"
grep -q "did not stop within 10 s" "$T/out" || fail "attach: $(cat "$T/out")"
info "$(cat "$T/out")"
"$CLIENT" --control "$dst_SOCK" status >/dev/null || fail "the destination daemon does not answer"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "the target got a userfaultfd"
# The child goes; the thread comes back from vfork() and is let go.
kill -9 "$child"
ok=
for _ in $(seq 50); do
	ok=1
	for task in /proc/"$WD"/task/*; do
		# The thread back from vfork() may end meanwhile: skip it.
		st=$(sed -n 's/^State:\t\(.\).*/\1/p' "$task/status" 2>/dev/null) || continue
		tr=$(sed -n 's/^TracerPid:\t//p' "$task/status" 2>/dev/null) || continue
		{ [ "$tr" = 0 ] && [ "$st" != t ] && [ "$st" != T ]; } || ok=
	done
	[ -n "$ok" ] && break
	sleep 0.1
done
[ -n "$ok" ] || fail "a thread of the target is still traced or stopped: $(grep -h 'State\|TracerPid' /proc/"$WD"/task/*/status | tr '\n' ' ')"
info "every thread of the target runs untraced once the child is gone"
kill -0 "$dst_PID" || fail "destination daemon died"
