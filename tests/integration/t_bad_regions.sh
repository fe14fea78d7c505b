#!/usr/bin/env bash
# A source (authenticated, but hostile or broken) that sends a bad region
# table: overlapping regions, a repeated index, an impossible page size,
# too many regions, a region that wraps around the address space, a
# region that would match but for its name (lines for the state file and
# a terminal escape, bytes that are not UTF-8, 300 bytes); or a frame
# other than the region table where the table belongs; or an error whose
# text is not UTF-8 and holds a terminal escape. The destination must
# refuse each before it sizes or registers anything, and leave the target
# process untouched; the attach must end, not wait. The peer's text
# reaches the client, status and the log as printable UTF-8 only, and a
# restarted destination daemon finds nothing to take up.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the hostile source)"
start_daemon dst
start_workload WD dest --size 16M --threads 1
tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")

# printable FILE...: UTF-8 without control characters but newlines, or
# the first file that is not.
printable() {
	python3 -c 'import sys
for f in sys.argv[1:]:
    try:
        t = open(f, "rb").read().decode("utf-8")
    except UnicodeDecodeError:
        t = "\0"
    if any(ord(c) < 32 and c != "\n" or 127 <= ord(c) < 160 for c in t):
        sys.exit(f)' "$@"
}

for case in overlap dup-index page-size too-many wrap name-inject name-bytes name-long \
	early-frame error-bytes; do
	rm -f "$T/port"
	python3 "$SRC/tests/fake-source.py" "$T/port" "$case" "${tls[@]}" 2>"$T/fake.log" &
	PIDS+=($!)
	fake=$!
	for _ in $(seq 200); do
		[ -s "$T/port" ] && break
		sleep 0.05
	done
	[ -s "$T/port" ] || fail "fake source did not start: $(cat "$T/fake.log")"
	rc=0
	checked "$T/out" timeout 30 "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$(cat "$T/port")" \
		--id 0123456789abcdef0123456789abcdef || rc=$?
	[ "$rc" != 124 ] || fail "$case: attach still waiting after 30 s"
	[ "$rc" != 0 ] || fail "$case: attach succeeded: $(cat "$T/out")"
	want="bad region table"
	[ "$case" != early-frame ] || want="unexpected frame on the demand lane"
	[ "$case" != error-bytes ] || want="no migration ??? here ?[31m"
	case $case in
	name-long) want="bad region table: region 0: name of 300 bytes, at most 255" ;;
	name-*) want="bad region table: region 0: name holds a control character or a byte that is not UTF-8" ;;
	esac
	grep -qF "$want" "$T/out" || fail "$case: $(cat -v "$T/out")"
	"$CLIENT" --control "$dst_SOCK" status >"$T/status.out"
	"$CLIENT" --control "$dst_SOCK" status --json >"$T/status.json"
	printable "$T/out" "$T/dst.log" "$T/status.out" "$T/status.json" 2>"$T/bad" ||
		fail "$case: $(cat "$T/bad") is not printable UTF-8: $(cat -v "$(cat "$T/bad")")"
	info "$case: $(cat "$T/out")"
	ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "$case: target got a userfaultfd"
	[ "$(proc_state "$WD")" != T ] || fail "$case: target left stopped"
	kill "$fake"
	wait "$fake" 2>/dev/null || true
done
kill -0 "$dst_PID" || fail "destination daemon died"

# Nothing was saved to take up: a destination daemon that restarts (after
# a crash) restores nothing into any process.
ls "$(state_dir dst)"/*.state 2>/dev/null && fail "refused attaches left state files"
kill_daemon dst
restart_daemon dst
grep -i "restored\|malformed" "$T/dst.log" && fail "the restarted destination took something up"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "target got a userfaultfd after the restart"
[ "$(proc_state "$WD")" != T ] || fail "target stopped after the restart"
"$CLIENT" --control "$dst_SOCK" status >"$T/status.out"
grep -qx "no migrations" "$T/status.out" || fail "status after the restart: $(cat -v "$T/status.out")"
info "restarted destination: nothing restored"
