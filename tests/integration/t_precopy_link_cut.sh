#!/usr/bin/env bash
# export --precopy across a link that goes down: the source host and the
# destination host are two network namespaces joined by veth. The link is
# cut for 5 s during the rounds, twice; each time the source's process runs
# on (its writes still tracked), the destination's target stays held, and
# when the link is back the destination resumes and the rounds start over,
# every page sent again. The result is byte for byte the source at its
# freeze (--keep-source). Then a cut just after the source sent SWITCHOVER
# behind a frozen round still on the wire (a slow link, tbf): the
# destination never saw it and holds its target; on the resume the source
# sends the frozen round's pages and SWITCHOVER again. Then a destination
# that never comes back: after
# pause-deadline the source ends the pre-copy and its process runs on,
# unregistered.
. "$SRC/tests/lib.sh"
need_root
make_hosts
start_daemon src --bulk-rate 12M --pause-deadline 4
start_daemon dst
BASE=0x520000000000
E=$((BASE + 48 * 1024 * 1024))
R=$(printf '%x-%x' $((BASE)) $E)
st() { "$CLIENT" --control "$1" status "$ID" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }
runs_on() {
	local h1 h2
	h1=$(mem_state "$WS" $BASE $E)
	sleep 0.3
	h2=$(mem_state "$WS" $BASE $E)
	[ "$(proc_state "$WS")" != T ] && [ "$h1" != "$h2" ]
}

start_workload WS source --base $BASE --size 48M --threads 1 --hot 3 --pace-us 100
start_workload WD dest --base $BASE --size 48M --threads 2 --prefault
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$R" --precopy --keep-source) ||
	fail "export --precopy failed"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$R" >"$T/attach.out" || fail "attach: $(cat "$T/attach.out")"
for i in 1 2; do
	sleep 1.5
	[ "$(st "$dst_SOCK")" = precopy ] || fail "cut $i: destination $(st "$dst_SOCK"), not in pre-copy: the cut proves nothing"
	cut_link "$src_PORT"
	sleep 5
	info "cut $i: after 5 s the source is $(st "$src_SOCK"), the destination $(st "$dst_SOCK")"
	runs_on || fail "cut $i: the source process does not run on during the cut"
	case "$(proc_state "$WD")" in t | T) ;; *) fail "cut $i: destination target runs before the switchover" ;; esac
	heal_link
done
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" ||
	fail "wait: $(cat "$T/wait.out")"
wait_verified WD
SAN_WHO="wait (source)" checked "$T/src-wait.out" "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 ||
	fail "source side did not complete: $("$CLIENT" --control "$src_SOCK" status "$ID")"
[ "$(proc_state "$WS")" = T ] || fail "source not left stopped at the end"
[ "$("$MEMHASH" "$WS" $BASE $E)" = "$("$MEMHASH" "$WD" $BASE $E)" ] ||
	fail "destination differs from the source at its freeze"
JSON=$("$CLIENT" --control "$dst_SOCK" status "$ID" --json)
rc=$(echo "$JSON" | sed -n 's/.*"reconnects":\([0-9]*\).*/\1/p')
rounds=$(echo "$JSON" | sed -n 's/.*"precopy_rounds":\([0-9]*\).*/\1/p')
[ "${rc:-0}" -ge 2 ] || fail "expected 2 reconnects, saw ${rc:-none}: $JSON"
info "byte-exact after 2 cuts during pre-copy: $rc reconnects, $rounds rounds"
kill -9 "$WS" "$WD"

info "a cut after SWITCHOVER was sent, before it arrived"
tc -n "$NS_SRC" qdisc add dev "$VETH_SRC" root tbf rate 16mbit burst 32kbit latency 400ms ||
	skip "no tbf qdisc to slow the link"
start_workload WS source --base $BASE --size 16M --threads 1 --hot 30 --pace-us 100
start_workload WD dest --base $BASE --size 16M --threads 2 --prefault
R16=$(printf '%x-%x' $((BASE)) $((BASE + 16 * 1024 * 1024)))
E16=$((BASE + 16 * 1024 * 1024))
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$R16" --precopy \
	--max-rounds 2 --keep-source) || fail "export --precopy failed"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$R16" >/dev/null || fail "attach failed"
for _ in $(seq 1200); do
	grep -q "migration ${ID:0:8}.*switchover after" "$T/src.log" && break
	sleep 0.05
done
cut_link "$src_PORT"
grep -q "migration ${ID:0:8}.*switchover after" "$T/src.log" || fail "no switchover in 60 s"
[ "$(st "$dst_SOCK")" = precopy ] ||
	fail "SWITCHOVER arrived before the cut ($(st "$dst_SOCK")): the test proves nothing"
sleep 5
heal_link
tc -n "$NS_SRC" qdisc del dev "$VETH_SRC" root
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >"$T/wait.out" ||
	fail "after switchover: wait: $(cat "$T/wait.out")"
wait_verified WD
grep -q "migration ${ID:0:8}.*SWITCHOVER sent again" "$T/src.log" ||
	fail "the source did not send SWITCHOVER again"
[ "$("$MEMHASH" "$WS" $BASE $E16)" = "$("$MEMHASH" "$WD" $BASE $E16)" ] ||
	fail "after switchover: destination differs from the source at its freeze"
info "byte-exact: SWITCHOVER and the frozen round's pages sent again on the resume"
kill -9 "$WS" "$WD"

info "a destination that never comes back"
start_workload WS source --base $BASE --size 48M --threads 1 --hot 3 --pace-us 100
start_workload WD dest --base $BASE --size 48M --threads 2 --prefault
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$R" --precopy) ||
	fail "export --precopy failed"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$R" >/dev/null || fail "attach failed"
sleep 1.5
cut_link "$src_PORT"
for _ in $(seq 150); do
	[ "$(st "$src_SOCK")" = failed ] && break
	sleep 0.1
done
[ "$(st "$src_SOCK")" = failed ] || fail "source $(st "$src_SOCK"), not failed, 15 s after the cut (pause-deadline 4)"
"$CLIENT" --control "$src_SOCK" status "$ID" | grep -q "pause-deadline" ||
	fail "source's reason does not name pause-deadline: $("$CLIENT" --control "$src_SOCK" status "$ID")"
runs_on || fail "source process not running after the pre-copy ended"
ls -l "/proc/$WS/fd" | grep -q userfaultfd && fail "source process holds a userfaultfd"
grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$WS/smaps" &&
	fail "source process still has ranges registered with a userfaultfd"
info "source: $("$CLIENT" --control "$src_SOCK" status "$ID" --json | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p')"
heal_link
kill -9 "$WS" "$WD"
