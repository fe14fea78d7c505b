#!/usr/bin/env bash
# A guest gives memory back with its virtio-balloon while its RAM is still
# arriving post-copy (issue 20). The guest (memcheck running throughout)
# first writes and frees 128 MiB, so that its free memory holds data on
# the source; it moves from QEMU A to QEMU B with migrate-qemu, the bulk
# stream slowed so that the post-copy lasts; on B, the balloon is
# inflated by 64 MiB (QMP balloon). QEMU punches each page out of B's
# RAM file and drops it from its mapping (madvise: UFFD_EVENT_REMOVE to
# the destination daemon). Afterwards every range the daemon was told of
# is still a hole in B's RAM file (no source byte brought back, no memory
# spent on it), status counts them, and memcheck saw no error, before and
# after the balloon is deflated again.
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
start_daemon src --bulk-rate 4M
start_daemon dst -v

APPEND="uffdd.balloon uffdd.scratch=128"
qemu a -device virtio-balloon-pci,id=balloon0
runs_on a 1
grep -q 'guest: balloon driver loaded' "$T/a.serial" ||
	fail "no balloon driver in the guest: $(grep guest: "$T/a.serial")"
grep -q 'insmod .* failed' "$T/a.serial" && fail "guest: $(grep 'insmod' "$T/a.serial")"
grep -q 'memcheck: wrote and freed 128 MiB' "$T/a.serial" || fail "no scratch written"
# A second QMP socket on B: migrate-qemu holds the first while it runs.
qemu b -incoming defer -device virtio-balloon-pci,id=balloon0 \
	-qmp "unix:$T/b2.qmp,server=on,wait=off"

"$CLIENT" migrate-qemu --src-qmp "$T/a.qmp" --dst-qmp "$T/b.qmp" \
	--src-control "$src_SOCK" --dst-control "$dst_SOCK" \
	--src-peer "$src_ADDR:$src_PORT" --timeout 300 >"$T/migrate.out" 2>&1 &
mq=$!
for _ in $(seq 600); do
	grep -q 'destination guest running' "$T/migrate.out" && break
	kill -0 "$mq" 2>/dev/null || break
	sleep 0.1
done
grep -q 'destination guest running' "$T/migrate.out" || fail "migrate-qemu: $(cat "$T/migrate.out")"
id=$(sed -n 's/.*source RAM exported: migration \([0-9a-f]*\).*/\1/p' "$T/migrate.out")
present() {
	"$CLIENT" --control "$dst_SOCK" status "$id" --json |
		sed -n 's/.*"pages_present":\([0-9]*\).*/\1/p'
}
p0=$(present)

# Inflate by 64 MiB (the guest keeps 448 MiB) while pages are missing.
st=$("$CLIENT" --control "$dst_SOCK" status "$id" --json)
echo "$st" | grep -q '"state":"running"' ||
	fail "the migration was over before the balloon; slow the bulk stream more: $st"
t0=$(date +%s.%N)
qmp b2 balloon '{"value": 469762048}' >/dev/null || fail "QMP balloon on B"
for _ in $(seq 1200); do
	actual=$(qmp b2 query-balloon | tr -d ' \n' | sed -n 's/.*"actual":\([0-9]*\).*/\1/p')
	[ "${actual:-0}" -le $((448 << 20)) ] && break
	sleep 0.1
done
[ "${actual:-0}" -le $((448 << 20)) ] || fail "the balloon did not inflate: actual ${actual:-?}"
info "balloon inflated to 448 MiB on B in $(echo "$(date +%s.%N) - $t0" | bc) s; pages present $p0 -> $(present) of 131072"

wait "$mq" || fail "migrate-qemu: $(cat "$T/migrate.out")"
gone "${QPID[a]}"
runs_on b 2
disc=$("$CLIENT" --control "$dst_SOCK" status "$id" --json |
	sed -n 's/.*"discarded_pages":\([0-9]*\).*/\1/p')
# Discards count while the migration runs (the daemon watches the guest
# until then): at least 16 MiB of the 64 must have come during it.
[ "${disc:-0}" -ge $((16 << 8)) ] || fail "status counts ${disc:-0} discarded pages for a 64 MiB balloon"

# Every range the daemon was told of is a hole in B's RAM file: QEMU's
# mapping of it (from /proc) turns each address into a file offset.
map=$(grep -F "$SHM-b" "/proc/${QPID[b]}/maps" | head -n 1)
[ -n "$map" ] || fail "B's RAM file is not mapped by B"
grep 'target discarded' "$T/dst.log" | sed -n 's/.*discarded 0x\([0-9a-f]*\)-0x\([0-9a-f]*\).*/\1 \2/p' >"$T/discarded"
# A's file (still there) says which of them held data on the source:
# some must, or nothing would have been there to bring back.
python3 - "$SHM-b" "$SHM-a" "$map" "$T/discarded" >"$T/holes.out" <<'PY' || fail "$(cat "$T/holes.out")"
import os, sys
path_b, path_a, mapline, ranges = sys.argv[1:5]
lo, hi = (int(x, 16) for x in mapline.split()[0].split("-"))
off0 = int(mapline.split()[2], 16)
fb, fa = os.open(path_b, os.O_RDONLY), os.open(path_a, os.O_RDONLY)
size = os.fstat(fb).st_size

def data_at(fd, off):
    """The first byte of data at or after off (size if none)."""
    try:
        return os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        return size

n = bad = on_a = 0
for line in open(ranges):
    a, b = (int(x, 16) for x in line.split())
    if a < lo or b > hi:
        continue
    s, e = a - lo + off0, b - lo + off0
    n += (e - s) >> 12
    on_a += sum(1 for o in range(s, e, 4096) if data_at(fa, o) == o)
    if data_at(fb, s) < e:
        bad += 1
        if bad <= 5:
            print(f"data in a discarded range: file offset {s:#x}-{e:#x}")
print(f"{n} discarded pages checked ({on_a} held data on A), {bad} ranges with data on B")
sys.exit(1 if bad or n == 0 or on_a == 0 else 0)
PY
info "$(cat "$T/holes.out"); status counts $disc discarded pages"
alloc_a=$(($(stat -c '%b * %B' "$SHM-a") >> 20))
alloc_b=$(($(stat -c '%b * %B' "$SHM-b") >> 20))
info "RAM file allocated: A $alloc_a MiB, B $alloc_b MiB"

# Deflated again, the guest has its memory back and runs on.
qmp b balloon '{"value": 536870912}' >/dev/null || fail "QMP balloon (deflate) on B"
runs_on b 2
info "B after deflating: $(tail -n 1 "$T/b.serial")"
