#!/usr/bin/env bash
# Huge pages larger than one frame: with default_hugepagesz=1G (common on
# VM hosts) a MAP_HUGETLB mapping has 1 GiB pages, and a frame carries at
# most 4 MiB of whole pages (FRAME_DATA_MAX), which is also what the
# source's buffers hold. Exporting a process with such a mapping must be
# refused with a reason that names the mapping, its page size and the
# largest uffdd migrates, before the process is frozen; the daemon goes on,
# with no sanitizer report. (Before this was refused, the export went
# through and the bulk lane read 1 GiB into a 4 MiB heap buffer.)
#
# This machine need not have 1 GiB pages: the source daemon runs in a mount
# namespace of its own where /proc/meminfo, which is where uffdd learns the
# huge page size, says 1 GiB. The process maps 1 GiB of shared hugetlb with
# MAP_NORESERVE, 1 GiB aligned, and never touches it: no huge page is taken
# from the pool.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the target process)"
command -v unshare >/dev/null || skip "unshare missing (util-linux)"
[ -e /proc/sys/vm/nr_hugepages ] || skip "no hugetlbfs in this kernel"
unshare --mount --propagation private true 2>/dev/null ||
	skip "cannot make a mount namespace (unshare --mount)"

sed 's/^Hugepagesize:.*/Hugepagesize:    1048576 kB/' /proc/meminfo >"$T/meminfo"
cat >"$T/uffdd-1g" <<EOF
#!/bin/sh
exec unshare --mount --propagation private sh -c \
	'mount --bind "\$0" /proc/meminfo && exec "\$@"' "$T/meminfo" "$UFFDD" "\$@"
EOF
chmod +x "$T/uffdd-1g"
UFFDD=$T/uffdd-1g
start_daemon src

base=0x500000000000
python3 - "$base" "$T/continued" >"$T/target.out" 2>"$T/target.log" <<'EOF' &
import ctypes, signal, sys, time
base, flag = int(sys.argv[1], 0), sys.argv[2]
# A SIGCONT means the process was frozen (SIGSTOP) and let go again.
signal.signal(signal.SIGCONT, lambda *_: open(flag, "w").write("continued\n"))
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
# MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE | MAP_HUGETLB | MAP_FIXED_NOREPLACE
p = libc.mmap(base, 1 << 30, 3, 0x01 | 0x20 | 0x4000 | 0x40000 | 0x100000, -1, 0)
if p != base:
    sys.exit(f"mmap of 1 GiB of hugetlb at {base:#x}: errno {ctypes.get_errno()}")
print("ready", flush=True)
while True:
    time.sleep(60)
EOF
TP=$!
PIDS+=("$TP")
for _ in $(seq 200); do
	grep -q '^ready' "$T/target.out" && break
	kill -0 "$TP" 2>/dev/null || skip "cannot map hugetlb memory: $(cat "$T/target.log")"
	sleep 0.05
done
grep -q '^ready' "$T/target.out" || fail "target process not ready"

# With a range around the mapping, and the whole process.
for args in "--range 500000000000-500040000000" ""; do
	rc=0
	# shellcheck disable=SC2086
	checked "$T/out" "$CLIENT" --control "$src_SOCK" export "$TP" $args || rc=$?
	[ "$rc" != 0 ] || fail "export ${args:-of the whole process} of 1 GiB pages accepted: $(cat "$T/out")"
	for want in "1 GiB huge pages at 0x500000000000-0x500040000000" \
		"/anon_hugepage" "uffdd migrates pages of at most 4 MiB"; do
		grep -qF "$want" "$T/out" || fail "export ${args:-of the whole process}: no \"$want\" in: $(cat "$T/out")"
	done
	info "export ${args:-of the whole process}: $(cat "$T/out")"
	[ "$(proc_state "$TP")" != T ] || fail "target left stopped"
	[ ! -e "$T/continued" ] || fail "target was frozen before the export was refused"
done
kill -0 "$src_PID" || fail "source daemon died"
! grep -E 'AddressSanitizer|runtime error|LeakSanitizer' "$T/src.log" ||
	fail "sanitizer report in the source's log"
