#!/usr/bin/env bash
# Completion is a commit: the destination is complete only on the source's
# COMMIT, and the source kills its process only on the destination's
# COMMIT_ACK. Each step may be lost, and neither side may end torn or
# stuck:
#   - a COMMIT lost across a link cut (two hosts, veth): the destination
#     resumes without having acted on it, says COMPLETE again, and the
#     source checks again and commits anew; the same with the source
#     process continued during the cut: the new check finds it, and the
#     destination stops its target;
#   - the source's engine dies as the ACK arrives: the next engine takes
#     the export up still committing, and the destination's committed
#     resume is its ACK;
#   - the destination's engine dies once it has recorded the COMMIT,
#     before it acknowledged it or let its target go: the next engine
#     lets the target go and delivers the ACK;
#   - the destination's engine, then the whole daemon, killed after the
#     migration ended: the restarted one still lists it complete (its
#     ended record), so that a wait that rejoins is told so; a record
#     changed behind its back is refused, the migration listed failed;
#   - a peer of protocol version 1 is refused saying what to do, at attach
#     both ways, and on a resume (the pause deadline fails with that
#     reason, not "unreachable").
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the old peers)"
state() { "$CLIENT" --control "$1" status "$2" --json 2>/dev/null | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }
reason() { "$CLIENT" --control "$1" status "$2" --json 2>/dev/null | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p'; }
# until_state SOCK ID STATE SECS: polls every 20 ms.
until_state() {
	for _ in $(seq $(($4 * 50))); do
		[ "$(state "$1" "$2")" = "$3" ] && return 0
		sleep 0.02
	done
	return 1
}
# killed_source: the source completes and kills its process.
killed_source() {
	"$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 >"$T/swait.out" 2>&1 ||
		fail "$1: source: $(cat "$T/swait.out")"
	for _ in $(seq 100); do
		[ "$(proc_state "$WS" 2>/dev/null || echo gone)" != T ] && return
		sleep 0.05
	done
	fail "$1: source process still stopped after the ACK"
}
# whole: the destination is complete, byte for byte, its target let go.
whole() {
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60 >"$T/wait.out" 2>&1 ||
		fail "$1: destination: $(cat "$T/wait.out")"
	ls -l "/proc/$WD/fd" | grep -q 'anon_inode:\[userfaultfd\]' &&
		fail "$1: the target holds a userfaultfd after completion"
	[ "$("$MEMHASH" "$WD" "$M_BASE" "$M_END")" = "$H_SRC" ] ||
		fail "$1: the destination differs from the source"
}
# engine_died NAME WHEN: daemon NAME's engine died of the test knob
# UFFDD_TEST_EXIT_AT (exit 9), and its privileged part lives on: it starts
# a new engine, which takes the migration up as a restarted daemon does.
engine_died() {
	for _ in $(seq 600); do
		grep -q "engine exited with status 9" "$T/$1.log" && break
		sleep 0.05
	done
	grep -q "engine exited with status 9" "$T/$1.log" ||
		fail "the $1 engine did not die $2: $(tail -n 5 "$T/$1.log")"
	kill -0 "$(eval echo "\$${1}_PID")" || fail "the $1 daemon died with its engine"
}
# fresh NAME ARGS...: daemon NAME started anew (stopped first if it runs),
# its log emptied.
fresh() {
	local name=$1
	shift
	stop_daemon "$name"
	rm -f "$T/$name.sock"
	: >"$T/$name.log"
	eval "${name}_STARTS=1"
	start_daemon "$name" "$@"
}
# A migration small enough to end in a moment: it is its end that counts.
small_migration() {
	M_BASE=$1
	M_END=$(printf '0x%x' $((M_BASE + (64 << 20))))
	start_workload WS source --size 64M --threads 2 --base "$M_BASE"
	start_workload WD dest --size 64M --touch 0 --base "$M_BASE"
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$(printf '%x-%x' "$M_BASE" "$M_END")")
	H_SRC=$("$MEMHASH" "$WS" "$M_BASE" "$M_END")
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "${src_ADDR:-127.0.0.1}:$src_PORT" \
		--id "$ID" --range "$(printf '%x-%x' "$M_BASE" "$M_END")" >/dev/null
}

info "a COMMIT lost across a link cut"
make_hosts
UFFDD_TEST_COMMIT_DELAY_MS=2500
export UFFDD_TEST_COMMIT_DELAY_MS
start_daemon src
unset UFFDD_TEST_COMMIT_DELAY_MS
start_daemon dst
small_migration 0x500000000000
until_state "$dst_SOCK" "$ID" committing 60 || fail "never committing: $(state "$dst_SOCK" "$ID")"
cut_link
info "cut while $(state "$dst_SOCK" "$ID"); the COMMIT goes into it"
sleep 5
heal_link
whole "COMMIT lost"
killed_source "COMMIT lost"
[ "$(grep -c "COMMIT [0-9]* sent" "$T/src.log")" -ge 2 ] ||
	fail "the source did not commit again: $(grep COMMIT "$T/src.log")"
info "$(grep "COMMIT [0-9]* sent" "$T/src.log" | tail -n 1)"
kill -9 "$WD"

info "a COMMIT lost across a link cut, the source process continued meanwhile"
small_migration 0x510000000000
until_state "$dst_SOCK" "$ID" committing 60 || fail "never committing: $(state "$dst_SOCK" "$ID")"
n=$(grep -c "COMMIT [0-9]* sent" "$T/src.log")
cut_link
# Once the COMMIT went into the cut (a run before it is found at once).
for _ in $(seq 100); do
	[ "$(grep -c "COMMIT [0-9]* sent" "$T/src.log")" -gt "$n" ] && break
	sleep 0.05
done
[ "$(grep -c "COMMIT [0-9]* sent" "$T/src.log")" -gt "$n" ] || fail "no COMMIT sent into the cut"
kill -CONT "$WS"
sleep 0.05
kill -STOP "$WS"
sleep 5
heal_link
if "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60 >"$T/wait.out" 2>&1; then
	fail "completed on a source that ran: $(cat "$T/wait.out")"
fi
reason "$dst_SOCK" "$ID" | grep -q "target $WD stopped" || fail "destination: $(reason "$dst_SOCK" "$ID")"
[ "$(proc_state "$WD")" = T ] || fail "destination target not stopped: $(proc_state "$WD")"
until_state "$src_SOCK" "$ID" failed 10 || fail "source: $(state "$src_SOCK" "$ID")"
[ "$(proc_state "$WS")" = T ] || fail "source process not left stopped: $(proc_state "$WS")"
info "destination: $(reason "$dst_SOCK" "$ID")"
kill -9 "$WS" "$WD"
stop_daemons
unset HOSTS src_ADDR dst_ADDR

info "the source's engine dies as the COMMIT_ACK arrives"
UFFDD_TEST_EXIT_AT=commit
export UFFDD_TEST_EXIT_AT
fresh src
unset UFFDD_TEST_EXIT_AT
fresh dst
small_migration 0x520000000000
engine_died src "at the COMMIT_ACK"
whole "source's engine died"
killed_source "source's engine started again"
grep -q "destination resumes committed" "$T/src.log" || fail "no committed resume: $(tail -n 5 "$T/src.log")"
for _ in $(seq 100); do
	ls "$(state_dir dst)" | grep -q "^$ID.*\.state" || break
	sleep 0.05
done
ls "$(state_dir dst)" | grep -q "^$ID.*\.state" && fail "the destination's state file stayed after the echo"
kill -9 "$WD"

info "the destination's engine dies once it recorded the COMMIT"
UFFDD_TEST_EXIT_AT=commit
export UFFDD_TEST_EXIT_AT
fresh dst
unset UFFDD_TEST_EXIT_AT
small_migration 0x530000000000
engine_died dst "at the COMMIT"
whole "destination's engine started again"
grep -q "was committed; letting target $WD go" "$T/dst.log" || fail "$(tail -n 5 "$T/dst.log")"
killed_source "destination's engine started again"
kill -9 "$WD"

# rejoined NAME: the destination, restarted after the migration ended,
# still lists it complete, and a wait that rejoins is told so.
rejoined() {
	for _ in $(seq 600); do
		[ "$(state "$dst_SOCK" "$ID")" = complete ] && break
		sleep 0.05
	done
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 30 >"$T/wait.out" 2>&1 ||
		fail "$1: a rejoining wait: $(cat "$T/wait.out")"
	info "$1: $(grep "${ID:0:8}.* is listed as complete" "$T/dst.log" | tail -n 1)"
}
info "the destination killed once complete: the restart still says so"
small_migration 0x540000000000
whole "before the kills"
killed_source "before the kills"
F=$(state_dir dst)/$ID.destination.ended
for _ in $(seq 200); do
	[ -f "$F" ] && break
	sleep 0.05
done
[ -f "$F" ] || fail "no record of the outcome: $(ls "$(state_dir dst)")"
kill -9 "$(engine_pid dst)"
for _ in $(seq 600); do
	grep -q "${ID:0:8}.* is listed as complete" "$T/dst.log" && break
	sleep 0.05
done
grep -q "engine killed by signal 9" "$T/dst.log" || fail "the engine did not die: $(tail -n 5 "$T/dst.log")"
rejoined "engine killed"
kill_daemon dst
restart_daemon dst
rejoined "daemon killed"
grep -q '^state=complete' "$F" || fail "the record says: $(cat "$F")"
kill_daemon dst
sed -i 's/^pid=/pid=1/' "$F"
restart_daemon dst
until_state "$dst_SOCK" "$ID" failed 10 || fail "a changed record was taken: $(state "$dst_SOCK" "$ID")"
reason "$dst_SOCK" "$ID" | grep -q "state file refused at restart: .*\.ended" ||
	fail "changed record: $(reason "$dst_SOCK" "$ID")"
[ -f "$F.refused" ] && [ ! -e "$F" ] || fail "the changed record was not kept aside: $(ls "$(state_dir dst)")"
info "changed record: $(reason "$dst_SOCK" "$ID")"
kill -9 "$WD"

info "a destination of protocol version 1 is refused"
fresh dst --pause-deadline 10
tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")
start_workload WS source --size 16M --threads 1
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000)
PEER_VERSION=1 timeout 30 python3 "$SRC/tests/flood-peer.py" 127.0.0.1 "$src_PORT" "$ID" 0 "${tls[@]}" \
	</dev/null >"$T/old.out" 2>&1 || fail "old destination: $(cat "$T/old.out")"
grep -q "protocol version 1, this source speaks 2: upgrade uffdd on both hosts" "$T/old.out" ||
	fail "old destination told: $(cat "$T/old.out")"
info "old destination told: $(tr -cd '[:print:]' <"$T/old.out")"
[ "$(state "$src_SOCK" "$ID")" = waiting ] || fail "the export changed: $(state "$src_SOCK" "$ID")"
kill -9 "$WS"

# fake_source PORT CASE: an old source (fake-source.py) on PORT.
fake_source() {
	rm -f "$T/port"
	PEER_VERSION=1 PEER_PORT=$1 python3 "$SRC/tests/fake-source.py" "$T/port" "$2" \
		"${tls[@]}" 2>"$T/fake.log" &
	PIDS+=($!)
	FAKE=$!
	for _ in $(seq 200); do
		[ -s "$T/port" ] && return
		sleep 0.05
	done
	fail "fake source did not start: $(cat "$T/fake.log")"
}

info "a source of protocol version 1 is refused at attach"
fake_source 0 name
start_workload WD dest --size 16M --threads 1
expect_error "old source" "speaks protocol version 1, this destination 2: upgrade uffdd on both hosts" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$(cat "$T/port")" \
	--id 0123456789abcdef0123456789abcdef
kill -9 "$WD" "$FAKE"

info "a source of protocol version 1 is refused on a resume"
start_daemon slow --bulk-rate 4M
start_workload WS source --size 64M --threads 1
start_workload WD dest --size 64M --touch 0
ID=$("$CLIENT" --control "$slow_SOCK" export "$WS" --range 500000000000-500004000000)
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$slow_PORT" \
	--id "$ID" --range 500000000000-500004000000 >/dev/null
sleep 1
[ "$(state "$dst_SOCK" "$ID")" = running ] || fail "not running: $(state "$dst_SOCK" "$ID")"
kill_daemon slow
fake_source "$slow_PORT" name
if "$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 60 >"$T/wait.out" 2>&1; then
	fail "a resume to an old source completed: $(cat "$T/wait.out")"
fi
grep -q "speaks protocol version 1, this destination 2: upgrade uffdd on both hosts" "$T/wait.out" ||
	fail "resume refused: $(cat "$T/wait.out")"
grep -q "unreachable" "$T/wait.out" && fail "the reason says unreachable: $(cat "$T/wait.out")"
info "resume refused: $(cat "$T/wait.out")"
kill -9 "$WS" "$WD" "$FAKE"
