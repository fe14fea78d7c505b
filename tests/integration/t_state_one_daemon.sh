#!/usr/bin/env bash
# One daemon holds both ends of a migration (source and destination on one
# host, as with one uffdd a host). Each end has its own state file
# (ID.source.state, ID.destination.state): killed mid-migration and started
# again, the daemon restores both and the migration completes byte-exact.
# (With one file ID.state for both, the last writer won, and a restart
# took up only one end.) A file of the old name (ID.state) is still read,
# and takes its role's name; a file whose name and role disagree is
# refused.
. "$SRC/tests/lib.sh"
need_root
BASE=0x500000000000 END=0x500004000000 RANGE=500000000000-500004000000
start_daemon one --bulk-rate 8M
start_workload WS source --size 64M --threads 2
start_workload WD dest --size 64M --threads 4 --pace-us 400
ID=$("$CLIENT" --control "$one_SOCK" export "$WS" --range "$RANGE")
src_hash H_SRC "$WS" "$BASE" "$END"
"$CLIENT" --control "$one_SOCK" attach "$WD" --from "127.0.0.1:$one_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 || fail "attach: $(cat "$T/attach.out")"
kill -USR1 "$WD"
D=$(state_dir one)
for _ in $(seq 100); do
	[ -f "$D/$ID.source.state" ] && [ -f "$D/$ID.destination.state" ] && break
	sleep 0.05
done
[ -f "$D/$ID.source.state" ] && [ -f "$D/$ID.destination.state" ] ||
	fail "not one state file for each end: $(ls "$D")"
grep -q '^role=source' "$D/$ID.source.state" || fail "the source's file says another role"
grep -q '^role=destination' "$D/$ID.destination.state" || fail "the destination's file says another role"
sleep 1
"$CLIENT" --control "$one_SOCK" status "$ID" --json | grep -q '"state":"running"' ||
	fail "migration not running when the daemon is killed"

# Killed, and the destination's file takes the old name, as a daemon
# before this one wrote it.
kill_daemon one
mv "$D/$ID.destination.state" "$D/$ID.state"
restart_daemon one
grep -q "restored migration ${ID:0:8}.* into process $WD" "$T/one.log" ||
	fail "the destination end was not restored: $(tail -n 5 "$T/one.log")"
[ -f "$D/$ID.state" ] && fail "the file of the old name is still there: $(ls "$D")"
[ -f "$D/$ID.destination.state" ] || fail "the old file did not take its role's name: $(ls "$D")"
checked "$T/wait.out" "$CLIENT" --control "$one_SOCK" wait "$ID" --timeout 300 ||
	fail "wait: $(cat "$T/wait.out")"
wait_verified WD
H_DST=$(dst_hash H_SRC "$WD" "$BASE" "$END")
[ "$H_SRC" = "$H_DST" ] || fail "destination differs from the source after the restart"
info "both ends restored by one daemon; $(grep '^verified' "$T/WD.out")"
# The outcome stays, as ID.destination.ended (docs/state-files.md).
[ -z "$(ls "$D" | grep -v -e "^$ID\.destination\.ended$" -e '^grants$')" ] ||
	fail "state files left after completion: $(ls "$D")"
# The privileged part's records of both ends' grants go with them.
[ -z "$(ls "$D/grants")" ] || fail "grant records left after completion: $(ls "$D/grants")"
kill "$WD"

# A file named for one role that holds the other is refused, unread.
start_workload WS source --size 64M --threads 2
start_workload WD dest --size 64M --threads 4 --pace-us 400
ID=$("$CLIENT" --control "$one_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$one_SOCK" attach "$WD" --from "127.0.0.1:$one_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 || fail "attach: $(cat "$T/attach.out")"
for _ in $(seq 100); do
	[ -f "$D/$ID.destination.state" ] && break
	sleep 0.05
done
kill_daemon one
rm "$D/$ID.source.state"
mv "$D/$ID.destination.state" "$D/$ID.source.state"
restart_daemon one
grep -q "${ID:0:8}.*\.source\.state:[0-9]*: role: not the one the file is named after" "$T/one.log" ||
	fail "a destination's file named for the source was not refused: $(tail -n 5 "$T/one.log")"
[ -f "$D/$ID.source.state.refused" ] || fail "the refused file was not kept aside: $(ls "$D")"
info "$(grep -o "[^ ]*\.source\.state:[0-9]*: role: not the one.*" "$T/one.log" | head -n 1)"
