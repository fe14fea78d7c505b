# shellcheck shell=bash
# QEMU helpers for the end-to-end test and benchmark; sourced after
# tests/lib.sh. Sets CACHE (the prepared guest) or skips with the reason.
# prepare.sh says why it skips on stdout, which is CACHE then.
CACHE=$("$SRC/tests/e2e/prepare.sh") || {
	rc=$?
	[ "$rc" = 77 ] && skip "${CACHE#*SKIP: }"
	fail "tests/e2e/prepare.sh failed: $CACHE"
}
command -v qemu-system-x86_64 >/dev/null ||
	skip "qemu-system-x86_64 missing (Debian package qemu-system-x86)"
SHM=/dev/shm/uffdd-e2e-$$
on_cleanup "rm -f $SHM-*"
DISK=/var/tmp/uffdd-e2e-$$
on_cleanup "rm -f $DISK-*"
declare -A QPID

# qemu NAME [ARGS...]: the guest under TCG, its serial console in
# $T/NAME.serial, QMP on $T/NAME.qmp; its pid in QPID[NAME]. RAM is a shared
# file $SHM-NAME unless QEMU_RAM=anon (private anonymous, QEMU's default) or
# QEMU_RAM=numa (two NUMA nodes of 256 MiB, RAM blocks in the shared files
# $SHM-NAME and $SHM-NAME-1), or QEMU_RAM=mixed (the same, the second file
# on a disk file system: $DISK-NAME-1). RAM_FILE=PATH puts the RAM file
# (QEMU_RAM=file) there instead of $SHM-NAME.
# VAPIC=off drops the kvmvapic device, whose state load reads guest RAM.
# no_timer_check: under TCG on a loaded host the guest kernel's check of
# its IO-APIC timer can fail at boot ("IO-APIC + timer doesn't work!") and
# panic. APPEND adds to the guest kernel's command line (uffdd.balloon,
# uffdd.scratch=N: tests/e2e/prepare.sh).
# QEMU_NS=NETNS starts QEMU inside that network namespace (ip netns exec,
# which execs: QPID is QEMU's own pid); its QMP socket and files are paths
# as ever, reachable from anywhere.
qemu() {
	local name=$1 ram
	shift
	# shellcheck disable=SC2054 # commas inside one QEMU argument
	ram=(-object "memory-backend-file,id=ram0,size=512M,mem-path=${RAM_FILE:-$SHM-$name},share=on"
		-machine pc,memory-backend=ram0)
	[ "${QEMU_RAM:-file}" = anon ] && ram=(-machine pc)
	# shellcheck disable=SC2054
	[ "${QEMU_RAM:-file}" = numa ] &&
		ram=(-object "memory-backend-file,id=ram0,size=256M,mem-path=$SHM-$name,share=on"
			-object "memory-backend-file,id=ram1,size=256M,mem-path=$SHM-$name-1,share=on"
			-numa node,nodeid=0,memdev=ram0 -numa node,nodeid=1,memdev=ram1
			-machine pc)
	# shellcheck disable=SC2054
	[ "${QEMU_RAM:-file}" = mixed ] &&
		ram=(-object "memory-backend-file,id=ram0,size=256M,mem-path=$SHM-$name,share=on"
			-object "memory-backend-file,id=ram1,size=256M,mem-path=$DISK-$name-1,share=on"
			-numa node,nodeid=0,memdev=ram0 -numa node,nodeid=1,memdev=ram1
			-machine pc)
	rm -f "$T/$name.qmp" "$T/$name.serial"
	${QEMU_NS:+ip netns exec "$QEMU_NS"} qemu-system-x86_64 -accel tcg -m 512M -smp 1 -no-reboot "${ram[@]}" \
		-global "apic.vapic=${VAPIC:-on}" \
		-kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.gz" \
		-append "console=ttyS0 quiet panic=-1 no_timer_check${APPEND:+ $APPEND}" -display none -monitor none \
		-serial "file:$T/$name.serial" -qmp "unix:$T/$name.qmp,server=on,wait=off" \
		"$@" >"$T/qemu-$name.log" 2>&1 &
	PIDS+=($!)
	# shellcheck disable=SC2034 # read by the scripts that source this
	QPID[$name]=$!
	for _ in $(seq 100); do
		[ -S "$T/$name.qmp" ] && return
		sleep 0.1
	done
	fail "QEMU $name did not start: $(cat "$T/qemu-$name.log")"
}

# passes NAME: the number of memcheck passes NAME's console shows.
passes() { grep -c '^memcheck: pass' "$T/$1.serial" 2>/dev/null || true; }

# runs_on NAME N: waits until NAME's console shows N more passes, all ok.
runs_on() {
	local name=$1 want=$(($(passes "$1") + $2))
	for _ in $(seq 600); do
		[ "$(passes "$name")" -ge "$want" ] && break
		sleep 0.2
	done
	[ "$(passes "$name")" -ge "$want" ] ||
		fail "guest on $name stopped: $(tail -n 5 "$T/$name.serial")"
	if grep -q 'MISMATCH\|BAD' "$T/$name.serial"; then
		fail "memcheck on $name saw wrong memory: $(grep -m5 'MISMATCH\|BAD' "$T/$name.serial")"
	fi
}

# gone PID: the QEMU exited.
gone() {
	for _ in $(seq 100); do
		kill -0 "$1" 2>/dev/null || return 0
		[ "$(proc_state "$1" 2>/dev/null)" = Z ] && return 0
		sleep 0.1
	done
	fail "source QEMU $1 still running after the migration"
}

# qmp NAME COMMAND [ARGS-JSON]: one QMP command, its return on stdout and
# its exit status; a sanitizer report of the client fails the test
# (san_check), also when qmp runs in $(...).
qmp() {
	local tag=q${BASHPID}_$((SAN_N += 1)) rc=0
	ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$SAN/$tag \
		"$CLIENT" qmp "$T/$1.qmp" "${@:2}" 2>"$T/$tag.err" || rc=$?
	cat "$T/$tag.err" >&2
	san_check "qmp $1 ${2:-}" "$tag" "$rc" "$T/$tag.err"
	rm -f "$T/$tag.err"
	return "$rc"
}

# migrate_qemu A B [ARGS...]: the one-host flow from QEMU A to QEMU B, the
# source daemon ${SD:-src} (its _SOCK and _PORT), the destination's dst.
migrate_qemu() {
	local sd=${SD:-src}
	"$CLIENT" migrate-qemu --src-qmp "$T/$1.qmp" --dst-qmp "$T/$2.qmp" \
		--src-control "$(eval echo "\$${sd}_SOCK")" --dst-control "$dst_SOCK" \
		--src-peer "$src_ADDR:$(eval echo "\$${sd}_PORT")" --timeout 300 "${@:3}"
}

# precopied ID QEMUPID: the destination's status of migration ID shows a
# pre-copy of 2 rounds or more, post-copy faults for a small part of its
# pages only (what the guest wrote last; a post-copy alone faults far
# more: bench), and the source daemon tracked QEMU QEMUPID's writes. Sets
# ROUNDS, FAULTS and TOTAL.
precopied() {
	"$CLIENT" --control "$dst_SOCK" status "$1" --json >"$T/precopied.json"
	ROUNDS=$(sed -n 's/.*"precopy_rounds":\([0-9]*\).*/\1/p' "$T/precopied.json")
	FAULTS=$(sed -n 's/.*"demand_faults":\([0-9]*\).*/\1/p' "$T/precopied.json")
	TOTAL=$(sed -n 's/.*"pages_total":\([0-9]*\).*/\1/p' "$T/precopied.json")
	[ "${ROUNDS:-0}" -ge 2 ] ||
		fail "destination saw ${ROUNDS:-no} pre-copy rounds: $(cat "$T/precopied.json")"
	[ "${FAULTS:-0}" -lt $((TOTAL / 20)) ] ||
		fail "$FAULTS post-copy faults of $TOTAL pages after a pre-copy"
	grep -q "writes of process $2 to its memory tracked too (--track-unstopped" "$T/src.log" ||
		fail "the source daemon did not track QEMU's writes"
}
