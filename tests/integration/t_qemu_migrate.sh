#!/usr/bin/env bash
# QEMU postcopy with uffdd serving guest RAM (DESIGN section 7), end to end
# under TCG: a guest running memcheck (256 MiB filled with a pattern and
# re-verified forever) moves from QEMU A to QEMU B live with
# `uffd-client migrate-qemu` (device state by QEMU with x-ignore-shared,
# RAM post-copy by uffdd), and keeps running there with no mismatch; then
# from B to C with C left paused until every page is resident, where C's
# RAM file must equal B's byte for byte before C runs on. Each source QEMU
# has exited after its migration.
. "$SRC/tests/lib.sh"
need_root
CACHE=$("$SRC/tests/e2e/prepare.sh") || {
	rc=$?
	[ "$rc" = 77 ] && exit 77
	fail "tests/e2e/prepare.sh failed"
}
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 missing (Debian package qemu-system-x86)"
start_daemon src
start_daemon dst

SHM=/dev/shm/uffdd-e2e-$$
on_cleanup "rm -f $SHM-a $SHM-b $SHM-c"

# qemu NAME [ARGS...]: a guest with its RAM in $SHM-NAME (shared), serial
# console in $T/NAME.serial, QMP on $T/NAME.qmp; sets NAME_QEMU (pid).
qemu() {
	local name=$1
	shift
	qemu-system-x86_64 -accel tcg -m 512M -smp 1 -no-reboot \
		-object memory-backend-file,id=ram0,size=512M,mem-path=$SHM-$name,share=on \
		-machine pc,memory-backend=ram0 -global apic.vapic=off \
		-kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.gz" \
		-append "console=ttyS0 quiet panic=-1" -display none -monitor none \
		-serial "file:$T/$name.serial" -qmp "unix:$T/$name.qmp,server=on,wait=off" \
		"$@" >"$T/qemu-$name.log" 2>&1 &
	PIDS+=($!)
	eval "${name}_QEMU=$!"
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

migrate_qemu() {
	"$CLIENT" migrate-qemu --src-qmp "$T/$1.qmp" --dst-qmp "$T/$2.qmp" \
		--src-control "$src_SOCK" --dst-control "$dst_SOCK" \
		--src-peer "$src_ADDR:$src_PORT" --timeout 300 "${@:3}"
}

qemu a
info "booting the guest on A"
runs_on a 2
info "A: $(tail -n 1 "$T/a.serial")"

qemu b -incoming defer
info "A -> B, the guest running on B while its RAM arrives"
migrate_qemu a b 2>&1 | tee "$T/migrate-ab.out" || fail "migrate-qemu A -> B failed"
[ "${PIPESTATUS[0]}" = 0 ] || fail "migrate-qemu A -> B failed"
gone "$a_QEMU"
runs_on b 3
info "B: $(tail -n 1 "$T/b.serial")"

qemu c -incoming defer
info "B -> C, C paused until every page is resident"
migrate_qemu b c --no-resume 2>&1 | tee "$T/migrate-bc.out"
[ "${PIPESTATUS[0]}" = 0 ] || fail "migrate-qemu B -> C failed"
gone "$b_QEMU"
cmp "$SHM-b" "$SHM-c" || fail "C's RAM file differs from B's"
info "C's RAM file equals B's byte for byte ($(sha256sum <"$SHM-c" | cut -c1-16))"
"$CLIENT" qmp "$T/c.qmp" cont >/dev/null || fail "cont on C"
runs_on c 3
info "C: $(tail -n 1 "$T/c.serial")"
