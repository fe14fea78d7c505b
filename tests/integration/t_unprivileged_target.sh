#!/usr/bin/env bash
# A target that runs as an unprivileged user, with
# vm.unprivileged_userfaultfd left at 0: it may not create a userfaultfd
# itself, so the daemon hands it /dev/userfaultfd and has it ask the device
# for one. That kind can handle faults of kernel accesses, which the sysctl
# withholds from the user: the target keeps no copy of it (it finds none
# to use on a range of its own, during or after the migration) and is held
# with PTRACE_O_EXITKILL instead, so a daemon killed mid-migration takes it
# along rather than leave it reading zeros. The migration is byte-exact and
# the sysctl is never touched. What a signal costs the held target is
# printed.
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
# start_nobody_target ARGS...: WD, an unprivileged destination workload.
start_nobody_target() {
	rm -f "$T/WD.out"
	$WORKLOAD_PREFIX "$WORKLOAD" dest --size 64M "$@" >"$T/WD.out" 2>"$T/WD.log" &
	WD=$!
	PIDS+=("$WD")
	for _ in $(seq 200); do grep -q '^ready' "$T/WD.out" 2>/dev/null && break; sleep 0.05; done
	[ "$(stat -c %u "/proc/$WD")" = 65534 ] || fail "target does not run as nobody"
}
start_nobody_target --threads 4 --prefault --try-uffd --signal-bench 2000
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
src_hash H_SRC "$WS" 0x500000000000 0x500004000000
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 || fail "attach: $(cat "$T/attach.out")"
# Held, with no userfaultfd of its own.
# (By either part of the daemon: which one holds it is the split's business.)
tracer=$(awk '/^TracerPid:/ {print $2}' "/proc/$WD/status")
case " $(daemon_pids dst) " in
*" $tracer "*) ;;
*) fail "target not held by the destination daemon (its tracer: $tracer)" ;;
esac
ls -l "/proc/$WD/fd" | grep -q 'anon_inode:\[userfaultfd\]' &&
	fail "the target holds a userfaultfd it could not have made itself"
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >/dev/null || fail "migration did not complete"
wait_verified WD
grep -q '^uffd-attempt: fds 0, registered 0' "$T/WD.out" ||
	fail "the target found a userfaultfd to use: $(grep uffd-attempt "$T/WD.out")"
info "$(grep uffd-attempt "$T/WD.out")"
info "$(grep '^signals' "$T/WD.out" | tr '\n' ';')"
[ "$(awk '/^TracerPid:/ {print $2}' "/proc/$WD/status")" = 0 ] ||
	fail "target still held after completion"
H_DST=$(dst_hash H_SRC "$WD" 0x500000000000 0x500004000000)
[ "$H_SRC" = "$H_DST" ] || fail "destination differs from the source"
grep -q "from /dev/userfaultfd" "$T/dst.log" || fail "the daemon did not use /dev/userfaultfd"
[ "$(cat /proc/sys/vm/unprivileged_userfaultfd)" = 0 ] || fail "the sysctl changed"
ls /tmp | grep -q '^uffdd-pass-' && fail "hand-over directory left behind"
info "unprivileged target migrated through /dev/userfaultfd, sysctl still 0"

# The destination daemon dies mid-migration: the target dies with it
# (SIGKILL), and the restarted daemon says what happened. A source with a
# slow bulk lane keeps the migration running until then.
kill "$WD"
start_daemon slow --bulk-rate 2M
start_workload WS source --size 64M --threads 2
start_nobody_target --threads 4 --pace-us 1500
ID=$("$CLIENT" --control "$slow_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$slow_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 || fail "attach: $(cat "$T/attach.out")"
kill -USR1 "$WD"
sleep 1
"$CLIENT" --control "$dst_SOCK" status "$ID" --json | grep -q '"state":"running"' ||
	fail "the migration is not running any more before its daemon is killed"
kill_daemon dst
for _ in $(seq 100); do
	kill -0 "$WD" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$WD" 2>/dev/null && fail "target still runs 10 s after its daemon was killed"
rc=0
wait "$WD" || rc=$?
[ "$rc" = 137 ] || fail "target not killed with its daemon (exit $rc): $(tail -n 3 "$T/WD.log")"
grep -q '^verified' "$T/WD.out" && fail "the target went on after its daemon died"
info "destination daemon killed: its target died with it (SIGKILL), read no zeros"
restart_daemon dst
grep -q "migration into process $WD ended with the daemon" "$T/dst.log" ||
	fail "restart does not say what became of the target: $(tail -n 3 "$T/dst.log")"
kill -9 "$WS"

# A target sharing its memory or files with another process that an
# attach cannot stop is refused, and left as it was; so is the export of
# a source sharing its memory.
for share in vm files; do
	start_workload WS source --size 16M --threads 1
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000)
	start_workload WX dest --size 16M --threads 1 --sibling "$share"
	sib=$(sed -n 's/^sibling //p' "$T/WX.out")
	PIDS+=("$sib")
	if checked "$T/attach.out" "$CLIENT" --control "$dst_SOCK" attach "$WX" --from "$src_ADDR:$src_PORT" \
		--id "$ID" --range 500000000000-500001000000; then
		fail "attach to a target with a $share sibling succeeded"
	fi
	grep -q "shares its memory or files with $sib" "$T/attach.out" ||
		fail "refusal does not name sibling $sib: $(cat "$T/attach.out")"
	info "$share sibling: $(cat "$T/attach.out")"
	ls -l "/proc/$WX/fd" | grep -q 'anon_inode:\[userfaultfd\]' && fail "refused target got a userfaultfd"
	[ "$(proc_state "$WX")" != T ] && [ "$(proc_state "$WX")" != t ] || fail "refused target left stopped"
	kill -9 "$WX" "$sib" "$WS" 2>/dev/null || true
done
start_workload WS source --size 16M --threads 1 --sibling vm
sib=$(sed -n 's/^sibling //p' "$T/WS.out")
PIDS+=("$sib")
if checked "$T/export.out" "$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000; then
	fail "export of a source with a memory-sharing sibling succeeded"
fi
grep -q "shares its memory with $sib" "$T/export.out" || fail "export refusal: $(cat "$T/export.out")"
[ "$(proc_state "$WS")" != T ] || fail "refused export froze the source"
info "source with a vm sibling: $(cat "$T/export.out")"
