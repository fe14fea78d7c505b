#!/bin/bash
# ci-check.sh: CI hook for the kernel patch set.  Runs `make -C kernel check`
# (series applies to Debian's linux-source-6.1, touched files compile) and
# prints one plain result line.  Needs linux-source-6.1 installed (the check
# target installs it with apt-get if missing), gcc, make, flex, bison, bc,
# libelf-dev, libssl-dev.  About 3-6 minutes on 2 cores.
here=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp /tmp/kernel-check.XXXXXX)
t0=$(date +%s)
if make -C "$here" check >"$log" 2>&1; then
	echo "kernel-check: PASS ($(( $(date +%s) - t0 )) s): $(grep '^check: PASS' "$log" | head -1)"
	rm -f "$log"
	exit 0
fi
tail -30 "$log"
echo "kernel-check: FAIL ($(( $(date +%s) - t0 )) s), full log: $log"
exit 1
