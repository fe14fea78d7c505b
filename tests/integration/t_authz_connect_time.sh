#!/usr/bin/env bash
# A caller is what it was when it connected, never what its pid is later.
# Replays an attack of a review, as an unprivileged user the test makes: a
# client connects to a control socket open to everyone while the daemon is
# stopped (its event loop stalled, so the accept comes late), forks a
# child that keeps the connection, and runs su itself, which waits for a
# password with every capability. The child then asks to export a root
# process. The daemon judges the uid recorded at connect: refused, the
# process never stopped, no migration made, and the refusal logged.
. "$SRC/tests/lib.sh"
need_root
command -v su >/dev/null || skip "su missing (Debian package util-linux)"
[ -u "$(command -v su)" ] || skip "su is not setuid here"
make_user ATK
chmod 711 "$T"
"${AS_ATK[@]}" test -x "$CLIENT" || skip "the test user cannot run $CLIENT (build directory not readable)"
start_daemon src --control-mode 0666
start_workload WV source --size 16M --threads 1

kill -STOP "$src_PID"
rm -f "$T/race.out"
"${AS_ATK[@]}" /usr/bin/python3 "$SRC/tests/exec-after-connect.py" "$src_SOCK" "$WV" su root \
	>"$T/race.out" 2>"$T/race.err" &
RACE=$!
PIDS+=("$RACE")
for _ in $(seq 200); do
	grep -q '^sent' "$T/race.out" 2>/dev/null && break
	sleep 0.05
done
grep -q '^sent' "$T/race.out" || { kill -CONT "$src_PID"; fail "the attacker never sent: $(cat "$T/race.out" "$T/race.err")"; }
grep -q 'CapEff 0$' "$T/race.out" &&
	{ kill -CONT "$src_PID"; fail "su did not run with capabilities: $(cat "$T/race.out")"; }
info "$(grep '^connector' "$T/race.out")"
kill -CONT "$src_PID"
for _ in $(seq 200); do
	grep -q '^reply' "$T/race.out" 2>/dev/null && break
	sleep 0.05
done
grep -q '^reply 6 .*permission denied: uid '"$ATK"' may only migrate' "$T/race.out" ||
	fail "the export was not refused for uid $ATK: $(grep '^reply' "$T/race.out")"
[ "$(proc_state "$WV")" != T ] || fail "root's process was stopped"
"$CLIENT" --control "$src_SOCK" status --json >"$T/status.json"
grep -q '"id"' "$T/status.json" && fail "a migration was made: $(cat "$T/status.json")"
grep -q "control: uid $ATK (pid [0-9]*) refused on process $WV" "$T/src.log" ||
	fail "refusal not logged: $(tail -n 3 "$T/src.log")"
info "$(grep '^reply' "$T/race.out")"
pkill -KILL -u "$ATK" su 2>/dev/null || true
