#!/usr/bin/env bash
# A source (authenticated, but hostile or broken) that sends a bad region
# table: overlapping regions, a repeated index, an impossible page size,
# too many regions, a region that wraps around the address space; or a
# frame other than the region table where the table belongs; or an error
# whose text is not UTF-8 and holds a terminal escape. The destination
# must refuse each before it sizes or registers anything, and leave the
# target process untouched; the attach must end, not wait. The peer's
# text reaches the client and the log as printable UTF-8 only.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the hostile source)"
start_daemon dst
start_workload WD dest --size 16M --threads 1
tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")

for case in overlap dup-index page-size too-many wrap early-frame error-bytes; do
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
	timeout 30 "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$(cat "$T/port")" \
		--id 0123456789abcdef0123456789abcdef >"$T/out" 2>&1 || rc=$?
	[ "$rc" != 124 ] || fail "$case: attach still waiting after 30 s"
	[ "$rc" != 0 ] || fail "$case: attach succeeded: $(cat "$T/out")"
	want="bad region table"
	[ "$case" != early-frame ] || want="unexpected frame on the demand lane"
	[ "$case" != error-bytes ] || want="no migration ??? here ?[31m"
	grep -qF "$want" "$T/out" || fail "$case: $(cat -v "$T/out")"
	for f in "$T/out" "$T/dst.log"; do
		python3 -c 'import sys; t = open(sys.argv[1], "rb").read().decode("utf-8")
if any(ord(c) < 32 and c != "\n" or c == "\x7f" for c in t): sys.exit(1)' "$f" ||
			fail "$case: $f is not printable UTF-8: $(cat -v "$f")"
	done
	info "$case: $(cat "$T/out")"
	ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "$case: target got a userfaultfd"
	[ "$(proc_state "$WD")" != T ] || fail "$case: target left stopped"
	kill "$fake"
	wait "$fake" 2>/dev/null || true
done
kill -0 "$dst_PID" || fail "destination daemon died"
