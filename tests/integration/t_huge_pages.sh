#!/usr/bin/env bash
# Huge pages: THP-backed anonymous memory (MADV_HUGEPAGE on both sides;
# resident, swapped out, never touched and zero-filled pages; at attach
# the source still has most of it in huge pages, and its swapped ones still
# out: they are paged out in whole huge pages) and hugetlbfs
# (MAP_HUGETLB, 2 MiB pages: a whole huge page per fault, zero huge pages
# copied since hugetlb has no UFFDIO_ZEROPAGE; hugetlb pages never swap),
# byte-exact, with both classification paths. hugetlb both private and
# shared (MAP_SHARED|MAP_HUGETLB, whose page cache attach must empty; on
# the source, written pages dropped from its page tables but kept in the
# page cache, which pagemap does not show, must arrive too).
. "$SRC/tests/lib.sh"
need_root
set_up_zram_swap 1G
for how in scan read; do
	args=""
	[ "$how" = read ] && args=--no-pagemap-scan
	info "THP-backed anonymous memory, classification by $how"
	SRC_DAEMON_ARGS=$args migrate 64M 2 4 \
		"--kind thp --zero-every 16 --pageout-every 5" "--kind thp --zero-every 16"
	swapped=$(sed -n 's/^swapped //p' "$T/WS.out")
	info "THP: $swapped pages swapped out when ready, $SRC_SWAPPED still out at attach; AnonHugePages $SRC_AHP kB"
	[ "${swapped:-0}" -gt 100 ] || fail "THP: too few pages swapped out ($swapped)"
	[ "$SRC_SWAPPED" -ge "$swapped" ] || fail "THP: only $SRC_SWAPPED of $swapped swapped pages still out at attach"
	[ "$SRC_AHP" -ge $((64 * 1024 / 2)) ] ||
		fail "THP: the source had only $SRC_AHP kB of its 64 MiB in huge pages at attach: the test migrates 4 KiB pages"
	kill "$WD"
done

[ -w /proc/sys/vm/nr_hugepages ] || skip "cannot reserve huge pages (no /proc/sys/vm/nr_hugepages)"
reserve_huge_pages 64 ||
	skip "could not reserve 64 huge pages of 2 MiB (memory too fragmented, even after compaction)"
for how in scan read; do
	args=""
	[ "$how" = read ] && args=--no-pagemap-scan
	# Private and shared (MAP_SHARED|MAP_HUGETLB). The destination has
	# written its own bytes into the region first (--prefault); shared
	# hugetlb keeps those in its page cache unless attach punches a hole,
	# and then they would survive where no fault ever fires.
	# Shared: every third written page is then dropped from the source's
	# page tables (MADV_DONTNEED); its bytes live on in the page cache
	# only, where pagemap shows nothing.
	for kind in hugetlb hugetlb-shared; do
		info "hugetlbfs ($kind), 2 MiB pages, classification by $how"
		extra=""
		[ "$kind" = hugetlb-shared ] && extra="--pageout-every 3"
		SRC_DAEMON_ARGS=$args migrate 32M 1 4 "--kind $kind --zero-every 16 $extra" "--kind $kind --zero-every 16 $extra"
		JSON=$("$CLIENT" --control "$dst_SOCK" status "$MIG_ID" --json)
		echo "$JSON" | grep -q '"pages_total":16,' || fail "$kind region not counted in 2 MiB pages: $JSON"
		if [ -n "$extra" ]; then
			dropped=$(sed -n 's/^swapped //p' "$T/WS.out")
			info "$kind: $dropped written pages in the page cache only"
			[ "${dropped:-0}" -ge 3 ] || fail "too few pages dropped from the page tables ($dropped)"
		fi
		kill "$WD"
	done
done
# Shared hugetlb with a slow bulk lane, so that the checking threads ask for
# nearly every page on demand: the all-zero ones (never touched, or zeroed)
# must come as ZERO markers there too, not as 2 MiB of zeros each. (The
# bytes moved are no measure: a page the bulk lane sent while its request
# was in flight comes twice.)
info "hugetlbfs (hugetlb-shared), pages on demand"
# The destination opens its bulk lane 5 s late, so that the bulk lane
# cannot send the all-zero pages (which cost it nothing) before the
# checking threads ask for them: on a loaded machine it did.
stop_daemon dst
export UFFDD_BENCH_BULK_DELAY_MS=5000
start_daemon dst
unset UFFDD_BENCH_BULK_DELAY_MS
SRC_DAEMON_ARGS="--bulk-rate 1M" migrate 32M 1 4 "--kind hugetlb-shared --zero-every 4" \
	"--kind hugetlb-shared --zero-every 4"
JSON=$("$CLIENT" --control "$dst_SOCK" status "$MIG_ID" --json)
zero=$(echo "$JSON" | sed -n 's/.*"zero_pages":\([0-9]*\).*/\1/p')
demand=$(echo "$JSON" | sed -n 's/.*"demand_pages":\([0-9]*\).*/\1/p')
info "on demand: $demand of 16 pages; $zero came as ZERO markers"
# Pages not asked for came on the bulk lane: at most that many of the ZERO.
[ $((zero - (16 - demand))) -ge 1 ] ||
	fail "no all-zero huge page came on demand as a ZERO marker: zeros went as data: $JSON"
kill "$WD"
