#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz: frame decoding, the frame reader on a
# live connection, the configuration grammar, the control protocol, the
# source's and the destination's peer-message handlers against a real
# process, the state-file reader with the roles' restores from it, and the
# snapshot image reader),
# each for FUZZ_SECONDS: 20 in CI, 5 otherwise (longer runs:
# docs/testing.md). A crash, sanitizer report or leak fails the test;
# reproducers stay in BUILDDIR/fuzz-artifacts.
. "$SRC/tests/lib.sh"
command -v clang >/dev/null || skip "clang missing (Debian package clang) for libFuzzer"
secs=${FUZZ_SECONDS:-$([ "${CI:-}" = true ] && echo 20 || echo 5)}
make -j"$(nproc)" -C "$B" fuzz >"$T/fuzz-build.log" 2>&1 || fail "make fuzz: $(tail -n 20 "$T/fuzz-build.log")"
"$SRC/tests/fuzz/run.sh" "$B" "$secs" || fail "a fuzz target failed (see $B/fuzz-*.log)"
