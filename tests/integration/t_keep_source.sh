#!/usr/bin/env bash
# export --keep-source: after completion the source process stays, stopped,
# with its memory unchanged.
. "$SRC/tests/lib.sh"
need_root
EXPORT_ARGS=--keep-source migrate 32M 1 2
[ "$(proc_state "$WS")" = T ] || fail "source process not left stopped (state $(proc_state "$WS"))"
h=$("$MEMHASH" "$WS" 0x500000000000 0x500002000000)
[ "$h" = "$("$MEMHASH" "$WD" 0x500000000000 0x500002000000)" ] || fail "kept source differs"
info "source kept, stopped, memory equal to the destination's"
