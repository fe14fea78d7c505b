#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time, FUZZ_JOBS (the CPUs)
# at a time.
#   tests/fuzz/run.sh BUILDDIR [SECONDS]   after `make -C BUILDDIR fuzz`
#   tests/fuzz/run.sh --seeds BUILDDIR     rewrite tests/fuzz/corpus
# Each target starts from tests/fuzz/corpus/NAME (read only) and a scratch
# corpus; a crash, sanitizer report or leak fails the run and leaves the
# reproducer in BUILDDIR/fuzz-artifacts/. Ends with "N targets, N failed".
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = --seeds ]; then
	B=$(cd "${2:?usage: run.sh --seeds BUILDDIR}" && pwd)
	SRC=$(cd "$HERE/../.." && pwd)
	cc -I"$SRC" -I"$B" $(pkg-config --cflags libprotobuf-c) -o "$B/tests/fuzz/mkseeds" \
		"$HERE/mkseeds.c" "$SRC/proto/frame.c" "$B/proto/uffdd.pb-c.c" \
		"$SRC/proto/image_write.c" "$SRC/proto/image.c" \
		$(pkg-config --libs libprotobuf-c libcrypto) || exit 1
	rm -rf "$HERE/corpus"
	exec "$B/tests/fuzz/mkseeds" "$HERE/corpus"
fi
B=$(cd "${1:?usage: run.sh BUILDDIR [SECONDS]}" && pwd)
SECS=${2:-60}
ART=$B/fuzz-artifacts
mkdir -p "$ART"
JOBS=${FUZZ_JOBS:-$(nproc)}

# one NAME: runs target NAME, its verdict lines on stdout; fails with it.
one() {
	local name=$1 bin=$B/tests/fuzz/fuzz_$1 work art
	if [ ! -x "$bin" ]; then
		echo "FAIL fuzz_$name: not built (make -C $B fuzz)"
		return 1
	fi
	work=$(mktemp -d "/tmp/uffdd-fuzz-$name.XXXXXX")
	# -close_fd_mask=2: the targets' own logging would drown the report.
	if "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
		-close_fd_mask=2 -artifact_prefix="$ART/$name-" -print_final_stats=1 \
		"$work" "$HERE/corpus/$name" >"$B/fuzz-$name.log" 2>&1; then
		echo "PASS fuzz_$name (${SECS}s, $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$B/fuzz-$name.log" | grep -o '[0-9]*$') runs)"
		rm -rf "$work"
		return 0
	fi
	echo "FAIL fuzz_$name; last lines of $B/fuzz-$name.log:"
	tail -n 40 "$B/fuzz-$name.log" | sed 's/^/    /'
	# The test runner shows only lines that start with FAIL: the
	# report's own lines (error, first frames, reproducer) go so.
	grep -E '^==[0-9]+==|^ *#[0-9]+ 0x|^SUMMARY|Test unit written|^(artifact|MS:)|fuzz: ' \
		"$B/fuzz-$name.log" | grep -vE 'fuzzer::|libc\.so|compiler-rt|__sanitizer' |
		head -n 11 | sed "s/^/FAIL fuzz_$name: /"
	# The reproducer itself, where the log is all there is to see.
	art=$(ls -t "$ART/$name-"* 2>/dev/null | head -n 1)
	if [ -n "$art" ] && [ "$(stat -c %s "$art")" -le 8192 ]; then
		echo "FAIL fuzz_$name: reproducer $(basename "$art") in base64: $(base64 -w 0 "$art")"
	fi
	rm -rf "$work"
	return 1
}

# JOBS targets at a time (each fuzzes on one CPU for SECS seconds), their
# verdicts printed in the targets' order.
names=()
for name in frame conn conffile control source dest state image; do
	# The roles' targets export and attach a real process.
	case $name in source | dest)
		if [ "$(id -u)" != 0 ]; then
			echo "SKIP-PART: fuzz_$name: needs root (ptrace and userfaultfd in its target)"
			continue
		fi
		;;
	esac
	names+=("$name")
done
OUT=$(mktemp -d /tmp/uffdd-fuzz-out.XXXXXX)
for name in "${names[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
		wait -n
	done
	(one "$name" >"$OUT/$name" 2>&1; echo $? >"$OUT/$name.rc") &
done
wait
failed=0 n=0
for name in "${names[@]}"; do
	cat "$OUT/$name"
	n=$((n + 1))
	[ "$(cat "$OUT/$name.rc" 2>/dev/null)" = 0 ] || failed=$((failed + 1))
done
rm -rf "$OUT"
echo "$n targets, $failed failed"
[ "$failed" -eq 0 ]
