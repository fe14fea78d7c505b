#!/usr/bin/env bash
# 64 MiB private anonymous memory, resident garbage on the destination that
# attach must discard, 4 faulting threads: the smallest whole migration.
. "$SRC/tests/lib.sh"
need_root
migrate 64M 2 4
