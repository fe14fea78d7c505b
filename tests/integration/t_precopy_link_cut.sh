#!/usr/bin/env bash
# export --precopy across a link that goes down: the source host and the
# destination host are two network namespaces joined by veth. The link is
# cut for 5 s during the rounds, twice; each time the source's process runs
# on (its writes still tracked), the destination's target stays held, and
# when the link is back the destination resumes and the rounds start over,
# every page sent again. The result is byte for byte the source at its
# freeze (--keep-source). Then a destination that never comes back: after
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
	h1=$("$MEMHASH" "$WS" $BASE $E)
	sleep 0.3
	h2=$("$MEMHASH" "$WS" $BASE $E)
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
"$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 >/dev/null 2>&1 ||
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
