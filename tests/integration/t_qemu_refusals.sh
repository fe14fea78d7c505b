#!/usr/bin/env bash
# migrate-qemu refuses, before it stops the source guest, the guests whose
# RAM this way would not move whole: a RAM block on a disk file system
# beside one on tmpfs (uffdd leaves a non-tmpfs shared file out of the
# export, and x-ignore-shared has QEMU skip it: the destination would run
# on zeros there), and a destination whose RAM file is the source's own
# under another name (attach would punch holes in the running source's
# RAM). Each time the source guest runs on, never paused, its memory check
# clean.
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
start_daemon src
start_daemon dst

# refused FROM TO PATTERN: migrate-qemu must fail saying PATTERN, and
# leave FROM running without ever stopping its vCPUs.
refused() {
	if SAN_WHO="refused $1 $2" checked "$T/m.out" \
		"$CLIENT" migrate-qemu --src-qmp "$T/$1.qmp" --dst-qmp "$T/$2.qmp" \
		--src-control "$src_SOCK" --dst-control "$dst_SOCK" \
		--src-peer "$src_ADDR:$src_PORT" --timeout 60; then
		fail "migrate-qemu $1 -> $2 succeeded: $(cat "$T/m.out")"
	fi
	grep -q "$3" "$T/m.out" || fail "$1 -> $2: refusal does not say '$3': $(cat "$T/m.out")"
	grep -q 'source vCPUs stopped' "$T/m.out" && fail "$1 -> $2: the source was stopped first: $(cat "$T/m.out")"
	info "$1 -> $2 refused: $(grep 'uffd-client:' "$T/m.out" | tail -n 1)"
	[ "$(qmp "$1" query-status | sed -n 's/.*"status": *"\([a-z-]*\)".*/\1/p')" = running ] ||
		fail "$1 is not running: $(qmp "$1" query-status)"
	runs_on "$1" 2
}

DISK_FS=$(stat -f -c %T /var/tmp)
case $DISK_FS in
tmpfs | ramfs) skip_part "mixed RAM: /var/tmp is on $DISK_FS" ;;
*)
	info "a RAM block on $DISK_FS beside one on tmpfs"
	QEMU_RAM=mixed qemu m
	runs_on m 2
	QEMU_RAM=mixed qemu n -incoming defer
	refused m n "is not on tmpfs"
	kill -9 "${QPID[m]}" "${QPID[n]}"
	;;
esac

info "the destination's RAM file is the source's, hard-linked"
qemu a
runs_on a 2
ln "$SHM-a" "$SHM-a-link"
RAM_FILE=$SHM-a-link qemu b -incoming defer
refused a b "destination needs files of its own"
