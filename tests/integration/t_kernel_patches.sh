#!/usr/bin/env bash
# The fast part of the kernel work (issue 7), as CI runs it: the series in
# kernel/series applies to Debian's linux-source-6.1 and every file it
# touches compiles with -Werror (kernel/scripts/ci-check.sh; minutes, not a
# kernel build). The VM tests are `make -C kernel build vmtest`.
. "$SRC/tests/lib.sh"
need_root
for p in flex bison bc libelf-dev libssl-dev linux-source-6.1; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && continue
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$p" >"$T/apt.log" 2>&1 ||
		skip "cannot install $p: $(tail -n 1 "$T/apt.log")"
done
"$SRC/kernel/scripts/ci-check.sh" || fail "kernel patch set check failed"
