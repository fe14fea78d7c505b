#!/usr/bin/env bash
# A source whose pages are partly swapped out (zram): swapped pages are data,
# never mistaken for never-touched ones.
. "$SRC/tests/lib.sh"
need_root
set_up_zram_swap 1G
migrate 256M 2 4 "--pageout-every 3"
swapped=$(sed -n 's/^swapped //p' "$T/WS.out")
info "source had $swapped pages swapped out at freeze"
[ "${swapped:-0}" -gt 1000 ] || fail "too few pages swapped out ($swapped) for the test to mean anything"
