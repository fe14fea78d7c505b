#!/usr/bin/env bash
# A source (authenticated, but hostile or broken) sends a demand ZERO frame
# for 16 huge pages of 2 MiB: 32 MiB, where one frame covers at most 4 MiB
# (FRAME_DATA_MAX). hugetlb has no UFFDIO_ZEROPAGE: the destination copies
# its zeros from a 4 MiB zero source, and an unbounded copy would put the
# daemon's own memory past it into the target. The destination must refuse
# the frame with a logged reason and install nothing from it: no page of
# the target holds anything but zeros, the daemon lives on, and no
# sanitizer report is in its log.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the hostile source)"
[ "$(sed -n 's/^Hugepagesize: *\([0-9]*\) kB$/\1/p' /proc/meminfo)" = 2048 ] ||
	skip "the default huge page size is not 2 MiB (fake-source.py sends 2 MiB pages)"
reserve_huge_pages 32 ||
	skip "could not reserve 32 huge pages of 2 MiB (memory too fragmented, even after compaction)"
start_daemon dst
# Untouched: a byte that is not zero in it after the frame came from the
# daemon. It waits for SIGUSR1 before it reads its memory: never sent.
start_workload WD dest --kind hugetlb --size 32M --threads 1
base=0x500000000000
tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")

python3 "$SRC/tests/fake-source.py" "$T/port" huge-zero "${tls[@]}" 2>"$T/fake.log" &
PIDS+=($!)
for _ in $(seq 200); do
	[ -s "$T/port" ] && break
	sleep 0.05
done
[ -s "$T/port" ] || fail "fake source did not start: $(cat "$T/fake.log")"
timeout 30 "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$(cat "$T/port")" \
	--id 0123456789abcdef0123456789abcdef >"$T/out" 2>&1 ||
	fail "attach to the fake source failed: $(cat "$T/out")"
grep -q '^attached' "$T/out" || fail "attach printed: $(cat "$T/out")"

want="more than one frame covers"
for _ in $(seq 200); do
	grep -qF "$want" "$T/dst.log" && break
	kill -0 "$dst_PID" 2>/dev/null || fail "destination daemon died"
	sleep 0.05
done
grep -F "$want" "$T/dst.log" || fail "ZERO frame of 16 huge pages not refused with a reason"

# What each huge page of the target holds now: pagemap says which are
# present (a missing one would fault into the daemon if read), and those
# are read through /proc/PID/mem.
python3 - "$WD" "$base" 16 $((2 << 20)) >"$T/pages.out" <<'EOF' || fail "target memory: $(cat "$T/pages.out")"
import struct, sys
pid, base, n, ps = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3]), int(sys.argv[4])
installed, dirty = 0, 0
with open(f"/proc/{pid}/pagemap", "rb") as pm, open(f"/proc/{pid}/mem", "rb") as mem:
    for i in range(n):
        addr = base + i * ps
        pm.seek(addr // 4096 * 8)
        if not struct.unpack("<Q", pm.read(8))[0] >> 63 & 1:
            continue
        installed += 1
        mem.seek(addr)
        if mem.read(ps).count(0) != ps:
            dirty += 1
print(f"{installed} of {n} huge pages installed, {dirty} with bytes that are not zero")
sys.exit(1 if dirty else 0)
EOF
info "target: $(cat "$T/pages.out")"
grep -q '^0 of' "$T/pages.out" || fail "pages of the refused frame were installed: $(cat "$T/pages.out")"
kill -0 "$dst_PID" 2>/dev/null || fail "destination daemon died"
! grep -E 'AddressSanitizer|runtime error|LeakSanitizer' "$T/dst.log" ||
	fail "sanitizer report in the destination's log"
