#!/usr/bin/env bash
# The target writes to pages before they arrive: each write lands on top of
# the source's page (the expected hash applies the writes to the source).
. "$SRC/tests/lib.sh"
need_root
migrate 128M 2 8 "" "" 3
