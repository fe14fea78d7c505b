#!/usr/bin/env bash
# A QEMU guest moved between two hosts (docs/qemu-two-hosts.md, issue 20):
# two network namespaces joined by a veth (make_hosts), each with its
# uffdd, its QEMU and its own RAM file names. The destination's half
# (`migrate-qemu receive`, run on the destination host) starts first and
# waits; the source's half (`migrate-qemu send`) is given the same ID,
# made here. Both exit 0; the destination, left paused until every page is
# resident (receive --no-resume), holds the source's RAM byte for byte;
# the guest's memory checker passes there once it runs; the source QEMU has
# exited. Then the same with the link cut for 5 s after the switchover, the
# bulk stream slowed so that the post-copy is still running at the cut:
# the migration resumes and completes, the destination's RAM byte for byte
# the source's, and the checker sees no wrong byte once the guest runs. And one refusal: a receive for an ID no send
# exports gives up at its timeout, saying so, its QEMU not started. And a
# send stopped by SIGTERM before the stop leaves the source guest running
# with its migration capabilities off.
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
. "$SRC/tests/e2e/qemu-hosts.sh"
make_hosts
start_daemon src
# The second source daemon of the cut: its bulk stream slowed so that the
# post-copy still runs when the link goes.
start_daemon src2 --bulk-rate 8M
start_daemon dst

QEMU_NS=$NS_SRC qemu a
QEMU_NS=$NS_SRC qemu c
QEMU_NS=$NS_DST qemu b -incoming defer -S
QEMU_NS=$NS_DST qemu x -incoming defer
info "booting the guests on the source host"
runs_on a 2
runs_on c 1

# A receive whose ID no send exports: it gives up at its timeout, its QEMU
# never started.
t0=$SECONDS
expect_error "receive for an ID never exported" 'unknown migration ID' \
	ip netns exec "$NS_DST" "$CLIENT" --control "$dst_SOCK" migrate-qemu receive \
	--qmp "$T/x.qmp" --id "$(new_id)" --from "$SRC_HOST_ADDR:$src_PORT" \
	--incoming "$DST_HOST_ADDR:$(in_port)" --timeout 3
[ $((SECONDS - t0)) -ge 2 ] || fail "receive gave up before its --timeout 3: $(cat "$T/out")"
grep -q 'never started' "$T/out" || fail "receive did not say its QEMU was never started: $(cat "$T/out")"
info "receive said: $(grep -v '^migrate-qemu: ' "$T/out" | tr '\n' ' ')"
st=$(qmp x query-status)
echo "$st" | grep -q '"status":"inmigrate"' ||
	fail "QEMU x after the refused receive: $st"
info "QEMU x left not started: $st"

# A send stopped (SIGTERM, as systemctl stop or a Ctrl-C would) while it
# waits for its destination: it undoes what it did, as a failure does, and
# ends by the signal. The guest runs on and A's migration capabilities are
# as they were: x-ignore-shared left on would have a later plain migration
# of A skip its RAM.
info "send stopped by SIGTERM while it waits for its destination"
id=$(new_id)
send a src "$id" "$(in_port)"
wait_line "$T/send-a.err" 'waiting for the destination to attach' "$SEND_PID"
kill -TERM "$SEND_PID"
rc=0
wait "$SEND_PID" || rc=$?
[ "$rc" = 143 ] || fail "send exited $rc after SIGTERM (want 143, by the signal): $(cat "$T/send-a.err")"
grep -q 'Terminated: stopping' "$T/send-a.err" || fail "send did not say it was stopping: $(cat "$T/send-a.err")"
caps=$(qmp a query-migrate-capabilities)
for c in x-ignore-shared pause-before-switchover; do
	echo "$caps" | grep -q "\"capability\":\"$c\",\"state\":false\|\"state\":false,\"capability\":\"$c\"" ||
		fail "capability $c of A left on after the stopped send: $caps"
done
qmp a query-status | grep -q '"status":"running"' || fail "A is not running: $(qmp a query-status)"
"$CLIENT" --control "$src_SOCK" status "$id" --json >"$T/st.json" 2>&1
grep -q '"state":"failed"' "$T/st.json" && grep -q 'cancelled before go' "$T/st.json" ||
	fail "the stopped send's export was not cancelled: $(cat "$T/st.json")"
runs_on a 1
info "send said: $(grep -v '^migrate-qemu: ' "$T/send-a.err" | tr '\n' ' ')"

info "A (source host) -> B (destination host): receive first, then send"
id=$(new_id)
port=$(in_port)
receive b src "$id" "$port" --timeout 300 --no-resume
sleep 1
send a src "$id" "$port"
finish_both a b
[ "$(head -n 1 "$T/send-a.out")" = "$id" ] ||
	fail "send's first line is not the ID $id: $(cat "$T/send-a.out")"
grep -q 'every page resident' "$T/recv-b.out" ||
	fail "receive did not report every page resident"
gone "${QPID[a]}"
same_ram a b
runs_on b 3
info "B: $(tail -n 1 "$T/b.serial")"

info "C (source host) -> D (destination host), the link cut for 5 s after the switchover"
QEMU_NS=$NS_DST qemu d -incoming defer -S
id=$(new_id)
port=$(in_port)
receive d src2 "$id" "$port" --timeout 300 --no-resume
sleep 1
send c src2 "$id" "$port"
# Switchover: the device state is at the destination.
wait_line "$T/send-c.err" 'device state sent' "$SEND_PID"
sleep 0.5
st=$("$CLIENT" --control "$dst_SOCK" status "$id" --json)
echo "$st" | grep -q '"state":"running"' ||
	fail "the post-copy was over before the cut; slow the bulk stream more: $st"
# shellcheck disable=SC2154 # src2_PORT: set by start_daemon
cut_link "$src2_PORT"
info "link cut at $(echo "$st" | sed -n 's/.*"pages_present":\([0-9]*\).*/\1/p') pages present"
sleep 5
heal_link
info "link back"
finish_both c d
gone "${QPID[c]}"
grep -q '^  reconnects *[1-9]' "$T/recv-d.out" ||
	fail "no reconnect after the cut: $(cat "$T/recv-d.out")"
same_ram c d
runs_on d 3
info "D: $(tail -n 1 "$T/d.serial")"
