#!/usr/bin/env bash
# 1 GiB, 8 destination threads faulting at once while the bulk lane streams.
. "$SRC/tests/lib.sh"
need_root
migrate 1G 2 8
grep -q '"pages_total":262144' "$T/status.json" || fail "status: $(cat "$T/status.json")"
grep -q '"pages_present":262144' "$T/status.json" || fail "status: $(cat "$T/status.json")"
