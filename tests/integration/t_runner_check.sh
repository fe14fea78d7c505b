#!/usr/bin/env bash
# The suite proves what it says: a test that skips what it exists to prove
# does not pass CI, and a report of a sanitized client is not taken for
# the refusal a test expected.
#
# 1. tests/lib.sh's helpers see the client's sanitizer reports. Small tests
#    of their own run tests/sanfake as uffd-client (SANFAKE=client-*: it
#    says "uffd-client: refused: made up" and exits 1, as a refused client
#    would, after an ASan use after free, a leak or a UBSan overflow). Each
#    expected failure through expect_error, and an expected one run
#    through checked in $(...), must fail the test, naming the helper and
#    showing the report; a client run outside any helper must fail it at
#    cleanup. The same refusal with no report passes.
# 2. tests/run.sh, pointed at fake tests, fails a skip that
#    tests/allowed-skips (here: a scratch list) does not name, whole or of
#    a part, and an exit 77 with no reason, and the UBSan report of a test
#    that passed; with the skips listed they pass as skips, and run.sh
#    exits 0 only when nothing else failed.
. "$SRC/tests/lib.sh"
FAKE=$B/tests/sanfake
[ -x "$FAKE" ] || fail "$FAKE not built"

# inner NAME BODY: BODY as a test of its own, with tests/lib.sh sourced
# and sanfake as the client; the sanitizer options are lib.sh's alone.
# Output in $T/NAME.out; returns its exit status.
inner() {
	local name=$1 body=$2
	cat >"$T/$name.sh" <<EOF
. "\$SRC/tests/lib.sh"
CLIENT=$FAKE
$body
EOF
	env -u ASAN_OPTIONS -u UBSAN_OPTIONS -u LSAN_OPTIONS \
		bash "$T/$name.sh" >"$T/$name.out" 2>&1
}

# passes NAME BODY: the inner test passes.
passes() {
	inner "$1" "$2" || fail "$1: the harness failed a client that made no report: $(cat "$T/$1.out")"
	info "$1: passed"
}

# fails NAME WHO PATTERN BODY: the inner test fails, and a FAIL line names
# WHO, a later one says PATTERN.
fails() {
	local name=$1 who=$2 pat=$3 rc=0
	inner "$name" "$4" || rc=$?
	[ "$rc" != 0 ] || fail "$name: passed; the harness did not see the client's report: $(cat "$T/$name.out")"
	grep -qF -- "FAIL: $who" "$T/$name.out" ||
		fail "$name: exit $rc, but no FAIL line names '$who': $(cat "$T/$name.out")"
	grep -qE -- "^FAIL: .*$pat" "$T/$name.out" ||
		fail "$name: its FAIL lines do not say '$pat': $(grep '^FAIL' "$T/$name.out")"
	info "$name: failed (exit $rc): $(grep -m1 -F "FAIL: $who" "$T/$name.out")"
}

passes refused-clean 'SANFAKE=client-clean expect_error "made up" "refused" "$CLIENT" status'
if [ "$SANITIZED" = 1 ]; then
	fails refused-asan 'expect_error made up: sanitizer report of sanfake' \
		'ERROR: AddressSanitizer: heap-use-after-free' \
		'SANFAKE=client-asan expect_error "made up" "refused" "$CLIENT" status
echo "went on"'
	grep -q "went on" "$T/refused-asan.out" && fail "refused-asan: expect_error went on past the report"
	fails refused-leak 'expect_error made up: sanitizer report of sanfake' \
		'ERROR: LeakSanitizer: detected memory leaks' \
		'SANFAKE=client-leak expect_error "made up" "refused" "$CLIENT" status'
	fails refused-ubsan 'expect_error made up: sanitizer report in its output' \
		'runtime error: signed integer overflow' \
		'SANFAKE=client-ubsan expect_error "made up" "refused" "$CLIENT" status'
	# Found in $(...), which exits alone: named at cleanup all the same.
	fails subshell-asan 'in a subshell: sanitizer report of sanfake' \
		'ERROR: AddressSanitizer: heap-use-after-free' \
		'x=$(SANFAKE=client-asan SAN_WHO="in a subshell" checked "$T/x" "$CLIENT" status; echo rc $?) || true
echo "went on: $x"'
	grep -q "went on" "$T/subshell-asan.out" ||
		fail "subshell-asan: the test did not go on to its cleanup: $(cat "$T/subshell-asan.out")"
	# Outside any helper: the report file is found at cleanup.
	fails bare-asan 'sanfake (pid ' 'ERROR: AddressSanitizer: heap-use-after-free' \
		'SANFAKE=client-asan "$CLIENT" status || true'
else
	skip_part "client sanitizer reports: a plain build makes none"
fi

# 2. run.sh itself, on fake tests.
mkdir -p "$T/suite" "$T/logs"
cat >"$T/suite/t_fake_skip.sh" <<'EOF'
. "$SRC/tests/lib.sh"
skip "made up whole"
EOF
cat >"$T/suite/t_fake_part.sh" <<'EOF'
. "$SRC/tests/lib.sh"
skip_part "made up part"
info "the rest ran"
EOF
cat >"$T/suite/t_fake_noreason.sh" <<'EOF'
exit 77
EOF
cat >"$T/suite/t_fake_pass.sh" <<'EOF'
. "$SRC/tests/lib.sh"
info "nothing left out"
EOF
cat >"$T/suite/t_fake_client.sh" <<EOF
. "\$SRC/tests/lib.sh"
CLIENT=$FAKE
SANFAKE=client-asan expect_error "made up" "refused" "\$CLIENT" status
EOF
# A UBSan report on the test's own stderr, where GCC's UBSan writes it
# (no helper saw it, the test went on): run.sh reads the output of a test
# that passed.
cat >"$T/suite/t_fake_ubsan.sh" <<'EOF'
. "$SRC/tests/lib.sh"
echo "../client/x.c:1:2: runtime error: signed integer overflow (made up)" >&2
EOF
: >"$T/none"
printf '# a scratch list\nt_fake_skip\tmade up whole\nt_fake_part\tmade up part\n' >"$T/listed"

# suite LIST OUT NAME...: run.sh on the fake tests NAME..., with LIST as
# the allowed skips; its output in $T/OUT, its exit status returned.
suite() {
	local list=$1 out=$2
	shift 2
	env -u PLAIN_BUILDDIR UFFDD_TEST_DIR="$T/suite" UFFDD_TEST_LOGS="$T/logs" \
		UFFDD_ALLOWED_SKIPS="$list" "$SRC/tests/run.sh" "$B" "$@" >"$T/$out" 2>&1
}
# says OUT LINE: run.sh's output holds LINE (a fixed string, whole).
says() {
	grep -qxF -- "$2" "$T/$1" || fail "$1: run.sh did not say '$2': $(cat "$T/$1")"
}

rc=0
suite "$T/none" unlisted.out t_fake_ || rc=$?
[ "$rc" != 0 ] || fail "run.sh exited 0 with unlisted skips: $(cat "$T/unlisted.out")"
says unlisted.out "FAIL t_fake_skip: skip not in $T/none: made up whole"
says unlisted.out "FAIL t_fake_part: skip not in $T/none: made up part"
says unlisted.out "FAIL t_fake_noreason: exit 77 without a line 'SKIP: reason'"
grep -q '^FAIL t_fake_ubsan: sanitizer report in its output: .*runtime error: signed integer overflow' "$T/unlisted.out" ||
	fail "run.sh passed a test with a UBSan report in its output: $(cat "$T/unlisted.out")"
if [ "$SANITIZED" = 1 ]; then
	grep -q '^FAIL t_fake_client (exit 1' "$T/unlisted.out" ||
		fail "a client's ASan report did not fail its test: $(cat "$T/unlisted.out")"
	grep -q '^    FAIL: expect_error made up: sanitizer report of sanfake' "$T/unlisted.out" ||
		fail "run.sh does not show which helper saw the report: $(cat "$T/unlisted.out")"
	says unlisted.out "1 passed, 5 failed, 0 skipped"
else
	says unlisted.out "2 passed, 4 failed, 0 skipped"
fi
grep -q '^PASS t_fake_pass ' "$T/unlisted.out" || fail "a test that left nothing out failed: $(cat "$T/unlisted.out")"
info "unlisted: run.sh exit $rc: $(tail -n 1 "$T/unlisted.out")"

rc=0
suite "$T/listed" listed.out t_fake_ || rc=$?
[ "$rc" != 0 ] || fail "run.sh exited 0 with a reasonless skip and reports: $(cat "$T/listed.out")"
says listed.out "SKIP t_fake_skip: made up whole"
says listed.out "    skipped part (allowed): made up part"
grep -q '^FAIL t_fake_noreason' "$T/listed.out" || fail "a listed run let a reasonless exit 77 pass: $(cat "$T/listed.out")"
grep -q '^FAIL t_fake_\(skip\|part\)' "$T/listed.out" && fail "listed skips failed: $(cat "$T/listed.out")"
info "listed: run.sh exit $rc: $(tail -n 1 "$T/listed.out")"

rc=0
suite "$T/listed" clean.out t_fake_skip t_fake_part t_fake_pass || rc=$?
[ "$rc" = 0 ] || fail "run.sh failed listed skips alone (exit $rc): $(cat "$T/clean.out")"
says clean.out "2 passed, 0 failed, 2 skipped"
info "listed skips alone: run.sh exit 0: $(tail -n 1 "$T/clean.out")"
info "an unlisted skip and a client's sanitizer report each fail"
