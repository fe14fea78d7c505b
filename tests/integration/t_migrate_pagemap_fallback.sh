#!/usr/bin/env bash
# The same swapped-out migration with the source classifying pages by
# batched pagemap reads instead of PAGEMAP_SCAN, so both paths are tested.
. "$SRC/tests/lib.sh"
need_root
set_up_zram_swap 1G
SRC_DAEMON_ARGS=--no-pagemap-scan migrate 256M 2 4 "--pageout-every 3"
grep -q "pagemap_scan .*not used\|pagemap_scan no" "$T/src.log" || fail "source did not use the fallback"
swapped=$(sed -n 's/^swapped //p' "$T/WS.out")
[ "${swapped:-0}" -gt 1000 ] || fail "too few pages swapped out ($swapped)"
[ "$SRC_SWAPPED" -ge "$swapped" ] ||
	fail "only $SRC_SWAPPED of the $swapped swapped pages were still out at attach"
