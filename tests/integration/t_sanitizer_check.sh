#!/usr/bin/env bash
# tests/lib.sh's shutdown rule cannot pass silently: at the end of a test
# every daemon gets SIGTERM and must exit 0 in time, and no daemon's log
# may hold a sanitizer report, also for daemons a test killed on purpose.
# Small tests of their own run tests/sanfake, a stand-in daemon that
# breaks the rule one way each (a leak, a UBSan or ASan report at
# shutdown, exit status 3, SIGTERM ignored, a report in the log of a
# daemon killed with SIGKILL, a bad stop through ensure_daemon's restart):
# each must fail, naming the daemon and showing the report, with only
# the sanitizer options lib.sh sets itself; one that keeps the rule
# passes. It fails if lib.sh turns leak detection off again, or stops
# daemons with SIGKILL alone.
. "$SRC/tests/lib.sh"
FAKE=$B/tests/sanfake
[ -x "$FAKE" ] || fail "$FAKE not built"
# lib.sh has checked the build kind run.sh declared (SANITIZED).
if [ "$SANITIZED" = 1 ]; then
	[ "$(san_kind "$FAKE")" = "$(san_kind "$UFFDD")" ] ||
		fail "uffdd has $(san_kind "$UFFDD"), $FAKE has '$(san_kind "$FAKE")': it would prove nothing"
fi

# inner NAME BODY: BODY as a test of its own, with tests/lib.sh sourced
# and sanfake as the daemon; the sanitizer options are lib.sh's alone.
# Output in $T/NAME.out; returns its exit status.
inner() {
	local name=$1 body=$2
	cat >"$T/$name.sh" <<EOF
. "\$SRC/tests/lib.sh"
UFFDD=$FAKE
$body
EOF
	env -u ASAN_OPTIONS -u UBSAN_OPTIONS -u LSAN_OPTIONS \
		-u DAEMON_STOP_TIMEOUT UFFDD_TEST_INSECURE=1 \
		bash "$T/$name.sh" >"$T/$name.out" 2>&1
}

# passes NAME BODY: the inner test passes.
passes() {
	inner "$1" "$2" || fail "$1: the harness failed a daemon that kept the rule: $(cat "$T/$1.out")"
	info "$1: passed"
}

# fails NAME PATTERN BODY: the inner test fails, and its FAIL lines name
# daemon "fake" and say PATTERN.
fails() {
	local name=$1 pat=$2 rc=0
	inner "$name" "$3" || rc=$?
	[ "$rc" != 0 ] || fail "$name: passed; the harness did not see it: $(cat "$T/$name.out")"
	grep -qE '^FAIL: daemon fake( \(pid [0-9]+\))?: ' "$T/$name.out" ||
		fail "$name: exit $rc, but no FAIL line names the daemon: $(cat "$T/$name.out")"
	grep -qE -- "^FAIL: .*$pat" "$T/$name.out" ||
		fail "$name: its FAIL lines do not say '$pat': $(grep '^FAIL' "$T/$name.out")"
	info "$name: failed (exit $rc): $(grep -m1 '^FAIL: daemon fake' "$T/$name.out")"
}

passes clean 'SANFAKE=clean start_daemon fake'
passes clean-killed 'SANFAKE=clean start_daemon fake; kill_daemon fake'
fails status 'exited with status 3 at SIGTERM' 'SANFAKE=status start_daemon fake'
fails hang 'still running 2 s after SIGTERM: killed' \
	'SANFAKE=hang start_daemon fake; DAEMON_STOP_TIMEOUT=2'
# A daemon killed on purpose has no exit status to check, but its log is
# read: a report it wrote before is found.
fails killed-report 'runtime error: made up for the test' \
	'SANFAKE=clean start_daemon fake; kill_daemon fake
echo "../daemon/x.c:1:2: runtime error: made up for the test" >>"$T/fake.log"'
# ensure_daemon, restarting a daemon with other arguments, checks the one
# it stops there and then.
fails restart 'exited with status 3 at SIGTERM' \
	'SANFAKE=status ensure_daemon fake
SANFAKE=clean ensure_daemon fake --other
echo "after the restart"'
grep -q "after the restart" "$T/restart.out" && fail "restart: ensure_daemon went on past a bad stop"
# Neither a test that skips nor one that fails hides a daemon's report.
fails exit-skip 'exited with status 3 at SIGTERM' 'SANFAKE=status start_daemon fake; skip "done"'

if [ "$SANITIZED" = 0 ]; then
	skip_part "leak, ubsan and asan cases: a plain build makes no sanitizer reports"
	exit 0
fi
fails leak 'ERROR: LeakSanitizer: detected memory leaks' 'SANFAKE=leak start_daemon fake'
grep -qE '^FAIL: daemon fake .*exited with status [1-9]' "$T/leak.out" ||
	fail "leak: the leaking daemon's exit status was not reported: $(grep '^FAIL' "$T/leak.out")"
fails ubsan 'runtime error: signed integer overflow' 'SANFAKE=ubsan start_daemon fake'
fails asan 'ERROR: AddressSanitizer: heap-use-after-free' 'SANFAKE=asan start_daemon fake'
info "every way of breaking the rule fails the test"
