#!/usr/bin/env bash
# A target that runs as an unprivileged user, with
# vm.unprivileged_userfaultfd left at 0: it may not create a userfaultfd
# itself, so the daemon hands it /dev/userfaultfd and has it ask the device
# for one. The migration is byte-exact and the sysctl is never touched.
. "$SRC/tests/lib.sh"
need_root
[ -c /dev/userfaultfd ] || skip "no /dev/userfaultfd on this kernel (5.11+)"
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
sysctl=$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo 0)
[ "$sysctl" = 0 ] || skip "vm.unprivileged_userfaultfd is $sysctl here; the test is about 0"
start_daemon src
start_daemon dst
RANGE=500000000000-500004000000
start_workload WS source --size 64M --threads 2
# The target: nobody, no capabilities.
WORKLOAD_PREFIX="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all"
$WORKLOAD_PREFIX "$WORKLOAD" dest --size 64M --threads 4 --prefault >"$T/WD.out" 2>"$T/WD.log" &
WD=$!
PIDS+=("$WD")
for _ in $(seq 200); do grep -q '^ready' "$T/WD.out" 2>/dev/null && break; sleep 0.05; done
[ "$(stat -c %u "/proc/$WD")" = 65534 ] || fail "target does not run as nobody"
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
H_SRC=$("$MEMHASH" "$WS" 0x500000000000 0x500004000000)
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 || fail "attach: $(cat "$T/attach.out")"
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >/dev/null || fail "migration did not complete"
wait_verified WD
H_DST=$("$MEMHASH" "$WD" 0x500000000000 0x500004000000)
[ "$H_SRC" = "$H_DST" ] || fail "destination differs from the source"
grep -q "from /dev/userfaultfd" "$T/dst.log" || fail "the daemon did not use /dev/userfaultfd"
[ "$(cat /proc/sys/vm/unprivileged_userfaultfd)" = 0 ] || fail "the sysctl changed"
ls /tmp | grep -q '^uffdd-pass-' && fail "hand-over directory left behind"
info "unprivileged target migrated through /dev/userfaultfd, sysctl still 0"
