#!/usr/bin/env bash
# Runs every test: unit test binaries, then integration scripts. Each test's
# exit status decides: 0 passed, 77 skipped (reason printed), else failed.
# Ends with the line "N passed, N failed, N skipped".
set -u
BUILDDIR=$(cd "${1:?usage: run.sh BUILDDIR [TEST...]}" && pwd)
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
export BUILDDIR SRC
LOGS=$BUILDDIR/test-logs
mkdir -p "$LOGS"
pass=0 failed=0 skipped=0 failures=()

tests=()
for t in "$BUILDDIR"/tests/unit/test_*; do
	[ -x "$t" ] && [ "${t%.c}" = "$t" ] && [ "${t%.o}" = "$t" ] && tests+=("$t")
done
for t in "$SRC"/tests/integration/t_*.sh; do
	tests+=("$t")
done
if [ $# -gt 0 ]; then
	sel=()
	for t in "${tests[@]}"; do
		for want in "$@"; do
			case "$(basename "$t")" in *"$want"*) sel+=("$t") ;; esac
		done
	done
	tests=("${sel[@]}")
fi

for t in "${tests[@]}"; do
	name=$(basename "$t" .sh)
	log=$LOGS/$name.log
	start=$(date +%s.%N)
	if [ "${t%.sh}" != "$t" ]; then
		bdir=$BUILDDIR
		# Tests that measure the daemon's own memory want the plain build.
		if [ -n "${PLAIN_BUILDDIR:-}" ] && grep -q '^# build: plain' "$t"; then
			bdir=$PLAIN_BUILDDIR
		fi
		BUILDDIR=$bdir timeout -k 10 1200 bash "$t" >"$log" 2>&1
	else
		timeout -k 10 300 "$t" >"$log" 2>&1
	fi
	rc=$?
	secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
	case $rc in
	0)
		pass=$((pass + 1))
		echo "PASS $name (${secs}s)"
		;;
	77)
		skipped=$((skipped + 1))
		echo "SKIP $name: $(grep -m1 '^SKIP:' "$log" | sed 's/^SKIP: //')"
		;;
	*)
		failed=$((failed + 1))
		failures+=("$name")
		echo "FAIL $name (exit $rc, ${secs}s)"
		# The test's own verdict first: daemon logs dumped after it
		# would otherwise push it out of the tail.
		grep -E '^(FAIL|==)' "$log" | tail -n 15 | sed 's/^/    /'
		echo "    last lines of $log:"
		tail -n 30 "$log" | sed 's/^/    /'
		;;
	esac
done
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "$pass passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
