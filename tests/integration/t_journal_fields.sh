#!/usr/bin/env bash
# Under journald each log line carries fields an operator can ask for
# (journalctl MIGRATION_ID=...): MIGRATION_ID (the 8 digits the line
# shows), ROLE, PEER and PID where they apply, and a stable MESSAGE_ID for
# the events operators alert on: migration failed, pages poisoned, peer
# refused, source continued. No journald runs in a test's container, so
# the daemons send the native protocol to a socket of the test's own
# (UFFDD_JOURNAL_SOCKET), which decodes every datagram. --log-journal yes
# keeps the stderr lines (stderr is not the journal here); with stderr the
# journal's own stream (JOURNAL_STREAM), auto sends each line only once.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the journal stand-in)"
FAILED=c7e9a80e2fdb84cfade2b15d8029d663
POISONED=57a98fdeafe4ebd648885ca6e4f1fe2a
REFUSED=c2d4814363f496bf086566e9d2f061ef
CONTINUED=ec47aa49bd6b933e98d93ff7dee0e4df

# listen NAME: a journal stand-in at $T/NAME.jsock, entries in $T/NAME.jout.
listen() {
	python3 "$SRC/tests/journal-listen.py" "$T/$1.jsock" "$T/$1.jout" >"$T/$1.jlisten" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 200); do
		grep -q listening "$T/$1.jlisten" && return
		sleep 0.05
	done
	fail "journal stand-in $1 did not start: $(cat "$T/$1.jlisten")"
}
# entries NAME KEY=VALUE...: the entries of NAME's journal with all these
# fields, as JSON lines.
entries() {
	local name=$1
	shift
	python3 - "$T/$name.jout" "$@" <<'PY'
import json, sys
want = dict(a.split("=", 1) for a in sys.argv[2:])
for line in open(sys.argv[1], encoding="utf-8"):
    e = json.loads(line)
    if all(e.get(k) == v for k, v in want.items()):
        print(line, end="")
PY
}
# wait_entry NAME KEY=VALUE...: until such an entry came; it is in $T/hit.
wait_entry() {
	for _ in $(seq 200); do
		entries "$@" >"$T/hit"
		[ -s "$T/hit" ] && return
		sleep 0.05
	done
	fail "no entry with $* in $1's journal; it has: $(tail -n 20 "$T/$1.jout")"
}
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readline()).get(sys.argv[1], ""))' "$1" <"$T/hit"; }

listen src
listen dst
UFFDD_JOURNAL_SOCKET=$T/src.jsock start_daemon src --log-journal yes --bulk-rate 4M
UFFDD_JOURNAL_SOCKET=$T/dst.jsock start_daemon dst --log-journal yes
grep -q "ready: control" "$T/src.log" || fail "--log-journal yes lost the stderr lines"
wait_entry src SYSLOG_IDENTIFIER=uffdd PRIORITY=6
grep -q '"BROKEN"' "$T/src.jout" "$T/dst.jout" && fail "entries that break the protocol: $(grep BROKEN "$T"/*.jout)"
info "lines reach the journal: $(field MESSAGE)"

# A failed migration: its source process killed while the destination
# still misses pages. Both sides say it, with the migration's fields.
RANGE=500000000000-500004000000
start_workload WS source --size 64M --threads 1
start_workload WD dest --size 64M --threads 4 --pace-us 300
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE" >/dev/null
kill -USR1 "$WD"
sleep 1
kill -9 "$WS"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60 >"$T/wait.out" 2>&1 &&
	fail "migration completed although its source died"
MID=${ID:0:8}
wait_entry dst MESSAGE_ID=$FAILED MIGRATION_ID="$MID"
[ "$(field ROLE)" = destination ] || fail "failed (destination): ROLE $(field ROLE): $(cat "$T/hit")"
[ "$(field PID)" = "$WD" ] || fail "failed (destination): PID $(field PID), want $WD"
[ "$(field PEER)" = "127.0.0.1:$src_PORT" ] || fail "failed (destination): PEER $(field PEER)"
[ "$(field PRIORITY)" = 4 ] || fail "failed: PRIORITY $(field PRIORITY), want 4 (warning)"
info "destination: $(field MESSAGE)"
grep -q "migration $MID… failed" "$T/dst.log" || fail "the stderr line is gone"
wait_entry dst MESSAGE_ID=$POISONED MIGRATION_ID="$MID" ROLE=destination PID="$WD"
info "destination: $(field MESSAGE)"
wait_entry src MESSAGE_ID=$FAILED MIGRATION_ID="$MID" ROLE=source PID="$WS"
info "source: $(field MESSAGE)"
# Every line that names the migration carries its ID, and no line the
# whole ID, a credential.
[ "$(entries dst MIGRATION_ID="$MID" | wc -l)" -ge 3 ] ||
	fail "few destination lines carry MIGRATION_ID: $(entries dst MIGRATION_ID="$MID")"
grep -q "$ID" "$T/src.jout" "$T/dst.jout" && fail "the whole migration ID is in the journal"

# A peer refused: a destination asking for an ID the source never gave
# (the target untouched: the source refuses before).
start_workload WS2 source --size 64M --threads 1
start_workload WD2 dest --size 64M --threads 4 --pace-us 1500
"$CLIENT" --control "$dst_SOCK" attach "$WD2" --from "127.0.0.1:$src_PORT" \
	--id 0123456789abcdef0123456789abcdef >/dev/null 2>&1 || true
wait_entry src MESSAGE_ID=$REFUSED
case $(field PEER) in
127.0.0.1:*) ;;
*) fail "refused: PEER $(field PEER): $(cat "$T/hit")" ;;
esac
info "source: $(field MESSAGE)"

# The source continued from elsewhere while the destination fetches.
ID2=$("$CLIENT" --control "$src_SOCK" export "$WS2" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD2" --from "127.0.0.1:$src_PORT" \
	--id "$ID2" --range "$RANGE" >/dev/null
kill -USR1 "$WD2"
sleep 0.5
kill -CONT "$WS2"
sleep 0.05
kill -STOP "$WS2"
wait_entry src MESSAGE_ID=$CONTINUED MIGRATION_ID="${ID2:0:8}" ROLE=source PID="$WS2"
info "source: $(field MESSAGE)"
"$CLIENT" --control "$dst_SOCK" wait "$ID2" --timeout 60 >/dev/null 2>&1 &&
	fail "the destination completed on a source that ran"

# auto, with stderr the journal's stream (JOURNAL_STREAM its dev:ino):
# each line goes to the journal only, not twice.
listen auto
: >"$T/auto.log"
JOURNAL_STREAM=$(stat -c '%d:%i' "$T/auto.log") UFFDD_JOURNAL_SOCKET=$T/auto.jsock \
	ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$T/auto.san \
	UBSAN_OPTIONS=$UBSAN_OPTIONS:log_path=$T/auto.san \
	"$UFFDD" -f --config "$T/empty.conf" --insecure --control "$T/auto.sock" \
	--state-dir "$T/auto.state" >>"$T/auto.log" 2>&1 &
daemon_started auto $!
wait_entry auto PRIORITY=6
for _ in $(seq 100); do
	[ -S "$T/auto.sock" ] && break
	sleep 0.05
done
grep -q "ready" "$T/auto.jout" || fail "auto: no ready line in the journal"
grep -q "ready" "$T/auto.log" && fail "auto: a line went to the journal twice: $(cat "$T/auto.log")"
stop_daemon auto
info "auto: stderr the journal, each line once"
