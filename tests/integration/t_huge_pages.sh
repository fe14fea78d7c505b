#!/usr/bin/env bash
# Huge pages: THP-backed anonymous memory (MADV_HUGEPAGE on both sides) and
# hugetlbfs (MAP_HUGETLB, 2 MiB pages: a whole huge page per fault, zero
# huge pages copied since hugetlb has no UFFDIO_ZEROPAGE), byte-exact.
. "$SRC/tests/lib.sh"
need_root
info "THP-backed anonymous memory"
migrate 64M 2 4 "--kind thp --zero-every 16" "--kind thp --zero-every 16"
kill "$WD"

[ -w /proc/sys/vm/nr_hugepages ] || skip "cannot reserve huge pages (no /proc/sys/vm/nr_hugepages)"
old=$(cat /proc/sys/vm/nr_hugepages)
on_cleanup "echo $old > /proc/sys/vm/nr_hugepages"
echo $((old + 64)) >/proc/sys/vm/nr_hugepages
[ "$(cat /proc/sys/vm/nr_hugepages)" -ge $((old + 64)) ] ||
	skip "could not reserve 64 huge pages of 2 MiB (memory too fragmented)"
info "hugetlbfs (MAP_HUGETLB), 2 MiB pages"
migrate 32M 1 4 "--kind hugetlb --zero-every 16" "--kind hugetlb --zero-every 16"
grep -q "hugetlb\|0x500000000000" "$T/attach.out" || true
JSON=$("$CLIENT" --control "$dst_SOCK" status "$MIG_ID" --json)
echo "$JSON" | grep -q '"pages_total":16,' || fail "hugetlb region not counted in 2 MiB pages: $JSON"
