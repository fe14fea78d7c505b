#!/usr/bin/env bash
# Runs every test: unit test binaries, then integration scripts. Each test's
# exit status decides: 0 passed, 77 skipped (reason printed), else failed.
# A skip proves nothing, so it fails unless the list of this machine kind
# names it: every "SKIP: reason" (a whole test, exit 77) and every
# "SKIP-PART: reason" (a part of a test that went on) in a test's output
# must match a line of tests/allowed-skips (UFFDD_ALLOWED_SKIPS=FILE names
# another kind's list), or the test counts as failed; so does an exit 77
# with no reason, and a test that passed with a sanitizer report in its
# output (GCC's UBSan writes only to stderr, wherever log_path points).
# Ends with the line "N passed, N failed, N skipped" (allowed sub-case
# skips counted among the skipped).
#
# UFFDD_BUILD_KIND (sanitized or plain) says what BUILDDIR is; when it is
# not set and PLAIN_BUILDDIR names a plain build beside it, BUILDDIR is
# the sanitized build. Each integration test is told its build's kind in
# UFFDD_BUILD_KIND, and tests/lib.sh fails it when the binaries are not
# of that kind. Tests marked "# build: plain" run on PLAIN_BUILDDIR when it
# is set; "# build: plain sanitized" ones run on both (NAME, then
# NAME.sanitized). UFFDD_TEST_DIR replaces tests/integration and
# UFFDD_TEST_LOGS BUILDDIR/test-logs (a test of this runner points them at
# fake tests and a scratch directory).
set -u
BUILDDIR=$(cd "${1:?usage: run.sh BUILDDIR [TEST...]}" && pwd)
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
export BUILDDIR SRC
LOGS=${UFFDD_TEST_LOGS:-$BUILDDIR/test-logs}
mkdir -p "$LOGS"
TEST_DIR=${UFFDD_TEST_DIR:-$SRC/tests/integration}
ALLOWED=${UFFDD_ALLOWED_SKIPS:-$SRC/tests/allowed-skips}
[ -f "$ALLOWED" ] || {
	echo "run.sh: $ALLOWED: no list of allowed skips" >&2
	exit 2
}
KIND=${UFFDD_BUILD_KIND:-}
[ -z "$KIND" ] && [ -n "${PLAIN_BUILDDIR:-}" ] && KIND=sanitized
# What ASan, LSan and UBSan reports say (as SAN_REPORT in tests/lib.sh).
SAN_REPORT='ERROR: (Address|Leak|UndefinedBehavior|Memory|Thread)Sanitizer|SUMMARY: [A-Za-z]*Sanitizer|runtime error: '
pass=0 failed=0 skipped=0 parts=0 failures=()

# Each run is "PATH<TAB>NAME<TAB>BUILDDIR<TAB>KIND".
runs=()
for t in "$BUILDDIR"/tests/unit/test_*; do
	[ -x "$t" ] && [ "${t%.c}" = "$t" ] && [ "${t%.o}" = "$t" ] &&
		runs+=("$t	$(basename "$t")	$BUILDDIR	$KIND")
done
for t in "$TEST_DIR"/t_*.sh; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .sh)
	build=$(sed -n 's/^# build: //p' "$t" | head -n 1)
	if [ -z "${PLAIN_BUILDDIR:-}" ] || [ -z "$build" ]; then
		runs+=("$t	$name	$BUILDDIR	$KIND")
		continue
	fi
	# Tests that measure the daemon's own memory want the plain build.
	runs+=("$t	$name	$PLAIN_BUILDDIR	plain")
	case " $build " in *" sanitized "*)
		runs+=("$t	$name.sanitized	$BUILDDIR	$KIND") ;;
	esac
done
if [ $# -gt 0 ]; then
	sel=()
	for r in "${runs[@]}"; do
		IFS=$'\t' read -r _ name _ _ <<<"$r"
		for want in "$@"; do
			case "$name" in *"$want"*) sel+=("$r") && break ;; esac
		done
	done
	runs=(${sel[@]+"${sel[@]}"})
fi

# allowed NAME REASON: the list names this skip of test NAME (a line
# "NAME<TAB>TEXT" whose TEXT is part of REASON).
allowed() {
	local t r
	while IFS=$'\t' read -r t r; do
		case $t in '' | '#'*) continue ;; esac
		[ "$t" = "$1" ] && [ -n "$r" ] && case $2 in *"$r"*) return 0 ;; esac
	done <"$ALLOWED"
	return 1
}

for r in ${runs[@]+"${runs[@]}"}; do
	IFS=$'\t' read -r t name bdir kind <<<"$r"
	log=$LOGS/$name.log
	start=$(date +%s.%N)
	if [ "${t%.sh}" != "$t" ]; then
		BUILDDIR=$bdir UFFDD_BUILD_KIND=$kind timeout -k 10 1200 bash "$t" >"$log" 2>&1
	else
		timeout -k 10 300 "$t" >"$log" 2>&1
	fi
	rc=$?
	secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
	# What the exit status alone does not say.
	problems=() said=() whole=""
	while IFS= read -r line; do
		reason=${line#*: }
		if ! allowed "$name" "$reason"; then
			problems+=("skip not in ${ALLOWED#"$SRC"/}: $reason")
		elif [ "${line%%:*}" = SKIP-PART ]; then
			said+=("$reason")
		fi
		[ "${line%%:*}" = SKIP ] && [ -z "$whole" ] && whole=$reason
	done < <(grep -E '^SKIP(-PART)?: ' "$log")
	[ "$rc" != 77 ] || [ -n "$whole" ] ||
		problems+=("exit 77 without a line 'SKIP: reason'")
	if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then
		line=$(grep -m1 -E "$SAN_REPORT" "$log") &&
			problems+=("sanitizer report in its output: $line")
	fi
	if [ ${#problems[@]} -eq 0 ] && [ "$rc" = 0 ]; then
		pass=$((pass + 1))
		parts=$((parts + ${#said[@]}))
		echo "PASS $name (${secs}s)"
		for p in ${said[@]+"${said[@]}"}; do
			echo "    skipped part (allowed): $p"
		done
	elif [ ${#problems[@]} -eq 0 ] && [ "$rc" = 77 ]; then
		skipped=$((skipped + 1))
		parts=$((parts + ${#said[@]}))
		echo "SKIP $name: $whole"
	else
		failed=$((failed + 1))
		failures+=("$name")
		for p in ${problems[@]+"${problems[@]}"}; do
			echo "FAIL $name: $p"
		done
		[ "$rc" = 0 ] || [ "$rc" = 77 ] && continue
		echo "FAIL $name (exit $rc, ${secs}s)"
		# The test's own verdict first: daemon logs dumped after it
		# would otherwise push it out of the tail.
		grep -E '^(FAIL|==)' "$log" | tail -n 15 | sed 's/^/    /'
		echo "    last lines of $log:"
		tail -n 30 "$log" | sed 's/^/    /'
	fi
done
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
[ "$parts" -gt 0 ] && echo "skipped: $skipped tests and $parts parts of tests that passed"
echo "$pass passed, $failed failed, $((skipped + parts)) skipped"
[ "$failed" -eq 0 ]
