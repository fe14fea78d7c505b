#!/usr/bin/env bash
# A source (authenticated, but hostile) names its region
# "x<newline>pid=V<newline>target_fd=3", V another process. The old
# key=value state files held the name raw, and a later record won: a
# restarted destination daemon read pid=V and target_fd=3 as its own and
# went to restore the migration into process V (taking V's userfaultfd and
# writing the source's pages there, had V had one at fd 3). The name is
# escaped now: the restarted daemon restores into the real target and
# never goes near V.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the hostile source)"
start_daemon dst
start_workload WD dest --size 16M --threads 1
start_workload WV dest --size 16M --threads 1 --base 0x510000000000
tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")
FAKE_REGION_NAME=$'x\npid='"$WV"$'\ntarget_fd=3' \
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
F=$T/dst.state/$ID.state
for _ in $(seq 100); do
	grep -qs '^state=running' "$F" && break
	sleep 0.05
done
grep -qs '^state=running' "$F" || fail "no state file of the running migration: $(ls -l "$T/dst.state")"
grep -c "^pid=" "$F" | grep -qx 1 || fail "the region name made a record of its own: $(cat "$F")"
info "saved as: $(grep '^region_name' "$F")"
kill_daemon dst
restart_daemon dst
grep -q "restored migration ${ID:0:8}.* into process $WD" "$T/dst.log" ||
	fail "not restored into the target $WD: $(tail -n 5 "$T/dst.log")"
grep -q "process $WV" "$T/dst.log" && fail "the restarted daemon went for process $WV: $(grep "process $WV" "$T/dst.log")"
info "restored into the target $WD; process $WV never named"
