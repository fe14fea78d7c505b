#!/usr/bin/env bash
# export --precopy --track: memory that one process holds and another
# writes, as a guest's RAM files are held by one process and written by
# QEMU. The writer (a workload source over shared memory, writing a hot
# set all along) forks a holder (--sibling holder: a process of its own
# that maps the same memory 1 TiB higher and never writes it). The holder
# is exported with --precopy --track WRITER: the rounds resend what the
# writer wrote (the holder writes nothing: every page of a later round is
# the writer's), both are stopped at the freeze, and the destination ends
# byte for byte equal to the memory then (memhash of the holder, which
# --keep-source keeps). Refused, with both processes left running: --track
# without --precopy, --track of the exported process, a tracked process
# that does not map the exported memory, private memory with --track, and
# a tracked process the caller could not ptrace (uid 65534 naming root's).
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
BASE=0x500000000000
HOLD=$(printf '0x%x' $((BASE + 0x10000000000)))
key() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }

# tracked KIND SIZE: one pre-copy of a held memory that the writer writes.
tracked() {
	local kind=$1 size=$2 bytes hend end h_src h_dst rounds
	bytes=$(numfmt --from=iec "$size")
	end=$(printf '0x%x' $((BASE + bytes)))
	hend=$(printf '0x%x' $((HOLD + bytes)))
	start_holder_pair --kind "$kind" --size "$size" --threads 2 --hot 5 --pace-us 20 "${@:3}"
	start_workload WD dest --kind "$kind" --size "$size" --threads 2
	ID=$("$CLIENT" --control "$src_SOCK" export "$H" --precopy --keep-source \
		--track "$WS" --range "$(printf '%x-%x' $((HOLD)) $((hend)))") ||
		fail "$kind: export --track failed"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
		--id "$ID" --range "$(printf '%x-%x' $((BASE)) $((end)))" \
		--map "$(printf '%x:%x' $((HOLD)) $((BASE)))" >"$T/attach.out" ||
		fail "$kind: attach: $(cat "$T/attach.out")"
	# Punched pages read as zeros, which the destination's own check
	# would call wrong: the hashes below decide then.
	[ $# -gt 2 ] || kill -USR1 "$WD"
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" ||
		fail "$kind: wait: $(cat "$T/wait.out")"
	[ $# -gt 2 ] || wait_verified WD
	SAN_WHO="wait (source)" checked "$T/src-wait.out" "$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 ||
		fail "$kind: source side did not complete: $("$CLIENT" --control "$src_SOCK" status "$ID")"
	[ "$(proc_state "$WS")" = T ] || fail "$kind: the tracked writer was not stopped at the freeze"
	[ "$(proc_state "$H")" = T ] || fail "$kind: the holder was not left stopped"
	h_src=$("$MEMHASH" "$H" "$HOLD" "$hend")
	h_dst=$("$MEMHASH" "$WD" "$BASE" "$end")
	[ "$h_src" = "$h_dst" ] || fail "$kind: destination differs from the memory at the freeze"
	"$CLIENT" --control "$src_SOCK" status "$ID" --json >"$T/$kind.src.json"
	rounds=$(key "$T/$kind.src.json" precopy_rounds)
	[ "$rounds" -ge 2 ] || fail "$kind: $rounds pre-copy rounds"
	# Round 2 on: pages written since the round before, all the writer's.
	grep -qE '"precopy_round_bytes":\[[0-9]+,[1-9]' "$T/$kind.src.json" ||
		fail "$kind: no writes of the tracked process resent: $(cat "$T/$kind.src.json")"
	grep -q "writes of process $WS to its memory tracked too" "$T/src.log" ||
		fail "$kind: the log does not say the writer is tracked"
	info "$kind: $rounds rounds, rounds' bytes $(grep -o '"precopy_round_bytes":\[[0-9,]*\]' "$T/$kind.src.json"), sha256 $h_src equal"
	[ -n "${KEEP:-}" ] || kill -9 "$WS" "$H" "$WD" 2>/dev/null || true
}

# uffd_fds NAME: the userfaultfds daemon NAME's engine holds.
uffd_fds() {
	local n=0 f
	for f in /proc/"$(engine_pid "$1")"/fd/*; do
		[ "$(readlink "$f" 2>/dev/null)" = "anon_inode:[userfaultfd]" ] && n=$((n + 1))
	done
	echo "$n"
}

# The writer punches holes too (MADV_REMOVE, as a balloon): pages sent in
# a round and punched since must read as zeros at the destination.
KEEP=1 tracked memfd 64M --discard-every 8
# Complete: both trackers are released, not closed (a close walks the
# process's page tables under its mmap lock, in the window where QEMU
# writes its device state): held until each process exits, at most
# 5 s. The same processes exported again meanwhile must be trackable.
[ "$(uffd_fds src)" -eq 2 ] || fail "complete: the engine holds $(uffd_fds src) userfaultfds, not the 2 released trackers"
kill -CONT "$WS" "$H"
ID=$("$CLIENT" --control "$src_SOCK" export "$H" --precopy --keep-source --track "$WS" \
	--range "$(printf '%x-%x' $((HOLD)) $((HOLD + 64 * 1024 * 1024)))") ||
	fail "export of the same processes while their trackers linger failed"
[ "$(uffd_fds src)" -eq 2 ] || fail "re-export: $(uffd_fds src) userfaultfds, not its own 2"
# Ended other than complete (the process gone), an export's trackers
# close at once.
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true
for _ in $(seq 20); do [ "$(uffd_fds src)" -eq 0 ] && break; sleep 0.1; done
[ "$(uffd_fds src)" -eq 0 ] || fail "a failed export left $(uffd_fds src) userfaultfds"
info "released trackers: held after completion, ended for a re-export and a failed export"
# The same in a tmpfs file, whose holes a watch of the file reports: the
# freeze searches only after one (and the rounds search as they come).
tracked tmpfs 32M --discard-every 8
if grep -q "punch_notify yes\|punch_notify tmpfs" "$T/src.log"; then
	grep -q "1 of 1 shared-memory regions watched for holes punched" "$T/src.log" ||
		fail "tmpfs: the file was not watched: $(grep 'watched for holes' "$T/src.log")"
fi
KEEP=1 tracked shared 32M
# Processes that live on (kept stopped here): their trackers end after
# 5 s all the same.
[ "$(uffd_fds src)" -eq 2 ] || fail "complete (shared): $(uffd_fds src) userfaultfds, not 2"
for _ in $(seq 100); do [ "$(uffd_fds src)" -eq 0 ] && break; sleep 0.1; done
[ "$(uffd_fds src)" -eq 0 ] || fail "trackers of live processes still held 10 s after completion"
grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$WS/smaps" &&
	fail "the tracked writer still has ranges registered after its tracker ended"
kill -9 "$WS" "$H" "$WD" 2>/dev/null || true

info "refusals: the processes stay as they were"
start_holder_pair --kind memfd --size 8M --threads 1 --hot 5 --pace-us 100
start_workload WO source --size 8M --threads 1 --hot 5 --pace-us 100 # private
HR=$(printf '%x-%x' $((HOLD)) $((HOLD + 8 * 1024 * 1024)))
refused() { # EXPECTED-TEXT ARGS...: export refused with that text
	local want=$1
	shift
	if "$CLIENT" --control "$src_SOCK" export "$@" >"$T/ref.out" 2>&1; then
		fail "export $* was not refused"
	fi
	grep -q -- "$want" "$T/ref.out" || fail "export $*: $(cat "$T/ref.out"), not: $want"
	for p in "$WS" "$H" "$WO"; do
		[ "$(proc_state "$p")" != T ] || fail "export $*: process $p left stopped"
		if grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$p/smaps"; then
			fail "export $*: process $p left with a userfaultfd registered"
		fi
	done
	info "refused: $(head -n 1 "$T/ref.out")"
}
refused "go with --precopy" "$H" --range "$HR" --track "$WS"
refused "the exported process itself" "$H" --range "$HR" --precopy --track "$H"
refused "does not map the file" "$H" --range "$HR" --precopy --track "$WO"
refused "does not map the file" "$H" --range "$HR" --precopy --track "$$"
refused "is private memory" "$WO" --range "$(printf '%x-%x' $((BASE)) $((BASE + 4096)))" \
	--precopy --track "$WS"
refused "not a process" "$H" --range "$HR" --precopy --track 1

# The tracked process is checked as the exported one: a caller may name
# only a process it could ptrace itself (uid 65534 here, a root writer).
info "the caller's right to the tracked process"
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if ! command -v setpriv >/dev/null || ! "${NOBODY[@]}" test -x "$CLIENT"; then
	fail "setpriv missing, or uid 65534 cannot run $CLIENT"
fi
chmod 711 "$T"
start_daemon srcu --control-mode 0666
cat >"$T/as-nobody" <<EOF2
#!/bin/sh
exec ${NOBODY[*]} "$WORKLOAD" "\$@"
EOF2
chmod 755 "$T/as-nobody"
WORKLOAD=$T/as-nobody start_workload WN source --kind memfd --size 8M --threads 1 \
	--hot 5 --pace-us 100 --sibling holder
HN=$(sed -n 's/^sibling //p' "$T/WN.out")
for _ in $(seq 100); do
	grep -q "^${HR%%-*}-" "/proc/$HN/maps" && break
	sleep 0.02
done
expect_error "uid 65534 tracks a root process" \
	"--track: process $WS: permission denied: uid 65534 may only migrate processes it could ptrace" \
	"${NOBODY[@]}" "$CLIENT" --control "$srcu_SOCK" export "$HN" --range "$HR" --precopy --track "$WS"
for p in "$HN" "$WS"; do
	[ "$(proc_state "$p")" != T ] || fail "refused --track left process $p stopped"
	if grep -qE 'VmFlags:.* (um|uw)( |$)' "/proc/$p/smaps"; then
		fail "refused --track left process $p with a userfaultfd registered"
	fi
done
# Its own writer it may track (positive control).
"${NOBODY[@]}" "$CLIENT" --control "$srcu_SOCK" export "$HN" --range "$HR" \
	--precopy --track "$WN" >"$T/nid.out" 2>&1 ||
	fail "uid 65534 cannot track its own writer: $(cat "$T/nid.out")"
grep -q "writes of process $WN to its memory tracked too" "$T/srcu.log" ||
	fail "uid 65534's writer is not tracked: $(tail -n 3 "$T/srcu.log")"
info "uid 65534 tracked its own writer"
kill -9 "$WS" "$H" "$WO" "$WN" "$HN" 2>/dev/null || true
stop_daemons
