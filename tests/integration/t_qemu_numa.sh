#!/usr/bin/env bash
# A guest with two RAM blocks (two NUMA nodes, each backed by its own shared
# file) moves from QEMU A to QEMU B with `uffd-client migrate-qemu`: both
# blocks are matched by name and served, B is held paused until every page
# of both is resident, each of B's RAM files then equals A's byte for byte,
# and the guest runs on on B with no mismatch.
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
export QEMU_RAM=numa
start_daemon src
start_daemon dst

qemu a
info "booting the two-node guest on A"
runs_on a 2
qemu b -incoming defer
info "A -> B, B paused until every page of both blocks is resident"
"$CLIENT" migrate-qemu --src-qmp "$T/a.qmp" --dst-qmp "$T/b.qmp" \
	--src-control "$src_SOCK" --dst-control "$dst_SOCK" \
	--src-peer "$src_ADDR:$src_PORT" --timeout 300 --no-resume 2>&1 |
	tee "$T/migrate.out"
[ "${PIPESTATUS[0]}" = 0 ] || fail "migrate-qemu A -> B failed"
gone "${QPID[a]}"
[ "$(grep -c '^attached' "$T/migrate.out")" = 2 ] ||
	fail "not both RAM blocks attached: $(grep '^attached' "$T/migrate.out")"
cmp "$SHM-a" "$SHM-b" || fail "B's first RAM block differs from A's"
cmp "$SHM-a-1" "$SHM-b-1" || fail "B's second RAM block differs from A's"
info "both RAM blocks equal A's byte for byte"
qmp b cont >/dev/null || fail "cont on B"
runs_on b 3
info "B: $(tail -n 1 "$T/b.serial")"
