#!/usr/bin/env bash
# One command from a fresh Debian 12 machine (as root):
#   tests/setup.sh demo   install what is missing, build, run the demo
#   tests/setup.sh check  install what is missing, build with -Werror and
#                         ASan/UBSan, run every test
set -euo pipefail
mode=${1:-}
case $mode in demo | check) ;; *)
	echo "usage: tests/setup.sh demo|check" >&2
	exit 2
	;;
esac
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "tests/setup.sh: run as root (it installs packages, and the tests use ptrace)" >&2; exit 1; }

DEPS="build-essential autoconf automake libtool pkg-config bc
      libevent-dev libssl-dev libprotobuf-c-dev protobuf-c-compiler liburing-dev libjson-c-dev
      util-linux procps iproute2 nftables
      openssl python3 python3-cryptography systemd man-db clang strace
      prometheus git dpkg-dev debhelper lintian"
missing=()
for p in $DEPS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing: ${missing[*]}"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

autoreconf -fi >/dev/null
if [ "$mode" = demo ]; then
	mkdir -p _build && cd _build
	[ -f Makefile ] || ../configure -q
	make -j"$(nproc)" >/dev/null
	exec ../tests/demo.sh .
fi
# The suite runs on the ASan/UBSan build; tests that measure the daemon's
# own memory run on a plain build (both built with -Werror).
mkdir -p _build && (cd _build && { [ -f Makefile ] || ../configure -q --enable-werror; } && make -j"$(nproc)" >/dev/null)
# A _build-check configured before without sanitizers is configured again:
# run.sh declares it sanitized, and the tests would fail on it.
mkdir -p _build-check && cd _build-check
{ [ -f Makefile ] && grep -q '^SAN_CFLAGS = .*-fsanitize=address' Makefile; } ||
	../configure -q --enable-werror --enable-sanitizers
make -j"$(nproc)" >/dev/null
UFFDD_BUILD_KIND=sanitized PLAIN_BUILDDIR=$(cd ../_build && pwd) \
	make -j"$(nproc)" check 2>&1 | grep -v '^make'
exit "${PIPESTATUS[0]}"
