#!/usr/bin/env bash
# sd_notify by hand: READY=1 with a STATUS= line once the sockets are open,
# WATCHDOG=1 keep-alives when systemd asks for them, RELOADING=1 and READY=1
# around a SIGHUP reload, STOPPING=1 at SIGTERM. A small python3 datagram
# listener stands in for systemd's NOTIFY_SOCKET.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the NOTIFY_SOCKET stand-in)"

python3 "$SRC/tests/notify-listen.py" "$T/notify.sock" "$T/notify.out" >"$T/listener.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do
	grep -q listening "$T/listener.out" && break
	sleep 0.05
done
grep -q listening "$T/listener.out" || fail "notify listener did not start: $(cat "$T/listener.out")"

# wait_msg PATTERN COUNT: until COUNT messages hold a line matching PATTERN.
wait_msg() {
	for _ in $(seq 400); do
		[ "$(grep -c -- "$1" "$T/notify.out" 2>/dev/null)" -ge "$2" ] && return
		sleep 0.05
	done
	fail "never got '$1' $2 times; got: $(cat "$T/notify.out" 2>/dev/null)"
}

# WATCHDOG_USEC=400000: keep-alives every 0.2 s. The daemon only counts
# them, the test waits for them, so timing does not decide the result.
NOTIFY_SOCKET=$T/notify.sock WATCHDOG_USEC=400000 start_daemon d
wait_msg '^READY=1$' 1
grep -q "^STATUS=ready; peers on 127.0.0.1:$d_PORT, control $d_SOCK$" "$T/notify.out" ||
	fail "no STATUS= with READY=1: $(cat "$T/notify.out")"
wait_msg '^WATCHDOG=1$' 3
grep -q '^STATUS=0 migrations, 0 active' "$T/notify.out" ||
	fail "keep-alives carry no STATUS=: $(cat "$T/notify.out")"
info "READY=1 and keep-alives received"

kill -HUP "$d_PID"
wait_msg '^RELOADING=1$' 1
wait_msg '^READY=1$' 2
info "reload: RELOADING=1, then READY=1"

kill -TERM "$d_PID"
wait_msg '^STOPPING=1$' 1
info "SIGTERM: STOPPING=1"

# A watchdog meant for another PID is not ours to feed. Absence cannot be
# awaited, so a daemon started after it with the same interval, its
# watchdog its own, is the clock: once that one has fed its watchdog
# three times (its loop ran 0.4 s and more), so would this one have;
# then it is stopped, and nothing may come before its STOPPING=1 (a
# datagram socket keeps one sender's order). d first gone: after its
# STOPPING=1 it still feeds its own watchdog until its engine has stopped.
stop_daemon d
: >"$T/notify.out"
python3 "$SRC/tests/notify-listen.py" "$T/clock-notify.sock" "$T/clock.out" >"$T/clock-listener.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do
	grep -q listening "$T/clock-listener.out" && break
	sleep 0.05
done
grep -q listening "$T/clock-listener.out" || fail "notify listener did not start: $(cat "$T/clock-listener.out")"
NOTIFY_SOCKET=$T/notify.sock WATCHDOG_USEC=400000 WATCHDOG_PID=1 start_daemon e
wait_msg '^READY=1$' 1
NOTIFY_SOCKET=$T/clock-notify.sock WATCHDOG_USEC=400000 start_daemon clock
for _ in $(seq 400); do
	[ "$(grep -c '^WATCHDOG=1$' "$T/clock.out" 2>/dev/null)" -ge 3 ] && break
	sleep 0.05
done
[ "$(grep -c '^WATCHDOG=1$' "$T/clock.out" 2>/dev/null)" -ge 3 ] ||
	fail "the clock daemon fed its watchdog fewer than 3 times: $(cat "$T/clock.out")"
kill -TERM "$e_PID"
wait_msg '^STOPPING=1$' 1
grep -q '^WATCHDOG=1$' "$T/notify.out" && fail "fed a watchdog meant for PID 1"
# Without NOTIFY_SOCKET nothing is sent and nothing breaks.
start_daemon f
"$CLIENT" --control "$f_SOCK" status >/dev/null || fail "daemon without NOTIFY_SOCKET"
