#!/usr/bin/env bash
# A source (authenticated, but hostile) names its region after the state
# file's own syntax: "x%0Apid=V%0Atarget_fd=3 =%3D", V another process.
# (The old key=value files held names raw, and a name with real newlines
# made records of its own: a restarted destination daemon went to restore
# into V. Such names are refused where the region table enters now:
# t_bad_regions.) This one is printable and passes, so it reaches the
# state file, whose escaping of '%', '=' and blanks must give back exactly
# these bytes: the restarted daemon restores into the real target, never
# goes near V, and saves the name again as the source sent it.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the hostile source)"
start_daemon dst
start_workload WD dest --size 16M --threads 1
start_workload WV dest --size 16M --threads 1 --base 0x510000000000
tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")
NAME="x%0Apid=$WV%0Atarget_fd=3 =%3D"
FAKE_REGION_NAME=$NAME \
	python3 "$SRC/tests/fake-source.py" "$T/port" name "${tls[@]}" 2>"$T/fake.log" &
PIDS+=($!)
for _ in $(seq 200); do
	[ -s "$T/port" ] && break
	sleep 0.05
done
[ -s "$T/port" ] || fail "fake source did not start: $(cat "$T/fake.log")"
ID=0123456789abcdef0123456789abcdef
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$(cat "$T/port")" \
	--id "$ID" >"$T/out" 2>&1 || fail "attach: $(cat "$T/out")"
F=$(state_dir dst)/$ID.destination.state
for _ in $(seq 100); do
	grep -qs '^state=running' "$F" && break
	sleep 0.05
done
grep -qs '^state=running' "$F" || fail "no state file of the running migration: $(ls -l "$(state_dir dst)")"
grep -c "^pid=" "$F" | grep -qx 1 || fail "the region name made a record of its own: $(cat "$F")"
SAVED=$(grep '^region_name' "$F")
info "saved as: $SAVED"
kill_daemon dst
restart_daemon dst
grep -q "restored migration ${ID:0:8}.* into process $WD" "$T/dst.log" ||
	fail "not restored into the target $WD: $(tail -n 5 "$T/dst.log")"
grep -q "process $WV" "$T/dst.log" && fail "the restarted daemon went for process $WV: $(grep "process $WV" "$T/dst.log")"
info "restored into the target $WD; process $WV never named"
# Read back and saved again by the restarted daemon: the same bytes.
[ "$(grep '^region_name' "$F")" = "$SAVED" ] ||
	fail "the name changed across the restart: $(grep '^region_name' "$F")"
