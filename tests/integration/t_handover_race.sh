#!/usr/bin/env bash
# A descriptor reaches a target without the target's file system, and only
# while nothing but the daemon can reach the target's file table. Replays
# two attacks of a review, as unprivileged users the test makes:
# 1. The target, in a user and mount namespace of its own with its own
#    /tmp and no capabilities, watches that /tmp while it is attached
#    through /dev/userfaultfd (vm.unprivileged_userfaultfd=0): every
#    directory that appears is swapped for a symlink, and a socket in it
#    for a symlink to a root-owned 0600 file, so that a root daemon going
#    on by path would chmod that file 0666. Nothing may appear there at
#    all, the file keeps its mode, and the migration is byte-exact.
# 2. A source whose file table a helper process shares (CLONE_FILES), the
#    helper copying any /dev/userfaultfd it sees there, is exported with
#    --precopy under the synchronous write tracker (6.1-6.6, forced here):
#    refused, naming the helper, which never gets the device.
. "$SRC/tests/lib.sh"
need_root
[ -c /dev/userfaultfd ] || skip "no /dev/userfaultfd on this kernel (5.11+)"
command -v unshare >/dev/null || skip "unshare missing (util-linux)"
[ "$(cat /proc/sys/vm/unprivileged_userfaultfd)" = 0 ] ||
	skip "vm.unprivileged_userfaultfd is not 0 here; the test is about 0"
make_user ATK
chmod 711 "$T"
"${AS_ATK[@]}" unshare -Urm true 2>/dev/null ||
	skip "unprivileged user and mount namespaces are off here"

VICTIM=$T/victim
echo secret >"$VICTIM"
chmod 600 "$VICTIM"
start_daemon src
start_daemon dst --control-mode 0666
RANGE=500000000000-500002000000
END=0x500002000000

# 1. The target: its own /tmp, a directory of its user's on the host's
# file system (not sticky, so it may move what root puts there), the watcher in the same mount namespace, the workload with no
# capability left even inside its namespace (so the caller may attach it).
mkdir "$T/atk-tmp"
chown "$ATK" "$T/atk-tmp"
chmod 777 "$T/atk-tmp"
start_workload WS source --size 32M --threads 2
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
H_SRC=$("$MEMHASH" "$WS" 0x500000000000 "$END")
rm -f "$T/WD.out"
# The watcher and the workload are reached through descriptors: the new
# /tmp hides whatever of the build lies under the old one.
# shellcheck disable=SC2016
"${AS_ATK[@]}" unshare -Urm sh -c '
	mount --bind "$2" /tmp || exit 9
	/usr/bin/python3 /proc/self/fd/4 /tmp "$1" >&3 2>&3 &
	exec setpriv --securebits +noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked \
		--inh-caps=-all --bounding-set=-all /proc/self/fd/5 dest --size 32M --threads 2 --prefault' \
	sh "$VICTIM" "$T/atk-tmp" 4<"$SRC/tests/handover-watch.py" 5<"$WORKLOAD" \
	3>"$T/watch.out" >"$T/WD.out" 2>"$T/WD.log" &
WD=$!
PIDS+=("$WD")
for _ in $(seq 200); do
	grep -q '^ready' "$T/WD.out" 2>/dev/null && break
	kill -0 "$WD" 2>/dev/null || fail "target died: $(cat "$T/WD.log")"
	sleep 0.05
done
grep -q '^ready' "$T/WD.out" || fail "target not ready"
WATCHER=$(pgrep -u "$ATK" python3) || fail "watcher not running"
PIDS+=("$WATCHER")
[ "$(awk '/^CapEff:/ {print $2}' "/proc/$WD/status")" = 0000000000000000 ] ||
	fail "the target kept capabilities"
"${AS_ATK[@]}" "$CLIENT" --control "$dst_SOCK" attach "$WD" \
	--from "$src_ADDR:$src_PORT" --id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 ||
	fail "attach as the target's user: $(cat "$T/attach.out")"
grep -q "from /dev/userfaultfd" "$T/dst.log" ||
	fail "the attach did not go through /dev/userfaultfd: $(tail -n 5 "$T/dst.log")"
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >/dev/null ||
	fail "migration did not complete"
wait_verified WD
H_DST=$("$MEMHASH" "$WD" 0x500000000000 "$END")
[ "$H_SRC" = "$H_DST" ] || fail "destination differs from the source"
[ "$(stat -c %a "$VICTIM")" = 600 ] ||
	fail "the victim's mode changed to $(stat -c %a "$VICTIM"): $(cat "$T/watch.out")"
[ "$(cat "$VICTIM")" = secret ] || fail "the victim changed"
grep -q '^saw' "$T/watch.out" &&
	fail "the daemon made something in the target's /tmp: $(cat "$T/watch.out")"
info "target's /tmp untouched during the hand-over; victim still $(stat -c %a "$VICTIM")"
kill "$WD" "$WATCHER" 2>/dev/null || true

# 2. A CLONE_FILES helper of the source during a sync-WP pre-copy.
UFFDD_TEST_SYNC_WP=1
export UFFDD_TEST_SYNC_WP
start_daemon syncsrc --control-mode 0666
unset UFFDD_TEST_SYNC_WP
grep -q 'uffd_wp_sync yes' "$T/syncsrc.log" ||
	skip "no synchronous uffd-wp here: $(grep -o 'kernel: .*' "$T/syncsrc.log")"
rm -f "$T/WH.out"
"${AS_ATK[@]}" "$WORKLOAD" source --size 32M --threads 1 --sibling files-grab \
	>"$T/WH.out" 2>"$T/WH.log" &
WH=$!
PIDS+=("$WH")
for _ in $(seq 200); do
	grep -q '^ready' "$T/WH.out" 2>/dev/null && break
	sleep 0.05
done
grep -q '^ready' "$T/WH.out" || fail "source with a helper not ready: $(cat "$T/WH.log")"
SIB=$(sed -n 's/^sibling //p' "$T/WH.out")
PIDS+=("$SIB")
if "${AS_ATK[@]}" "$CLIENT" --control "$T/syncsrc.sock" export "$WH" --range "$RANGE" \
	--precopy >"$T/export.out" 2>&1; then
	fail "pre-copy of a source whose file table a helper shares went ahead"
fi
grep -q "shares its memory or files with $SIB" "$T/export.out" ||
	fail "the refusal does not name helper $SIB: $(cat "$T/export.out")"
grep -q '^grabbed' "$T/WH.out" && fail "the helper took a copy of /dev/userfaultfd"
[ "$(proc_state "$WH")" != T ] || fail "the refused export left the source stopped"
ls -l "/proc/$WH/fd" | grep -q 'userfaultfd' && fail "the source holds a userfaultfd"
info "helper $SIB refused: $(cat "$T/export.out")"
