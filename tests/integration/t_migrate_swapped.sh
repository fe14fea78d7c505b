#!/usr/bin/env bash
# A source whose pages are partly swapped out (zram): swapped pages are data,
# never mistaken for never-touched ones. They are still out when the
# destination attaches (pagemap, just before attach: nothing has read
# them back in), so the source daemon serves them from swap.
. "$SRC/tests/lib.sh"
need_root
set_up_zram_swap 1G
migrate 256M 2 4 "--pageout-every 3"
swapped=$(sed -n 's/^swapped //p' "$T/WS.out")
info "source: $swapped pages swapped out when ready, $SRC_SWAPPED still out at attach"
[ "${swapped:-0}" -gt 1000 ] || fail "too few pages swapped out ($swapped) for the test to mean anything"
[ "$SRC_SWAPPED" -ge "$swapped" ] ||
	fail "only $SRC_SWAPPED of the $swapped swapped pages were still out at attach: the daemon served some from memory"
