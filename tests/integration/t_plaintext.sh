#!/usr/bin/env bash
# The plaintext lanes (--insecure, loopback only) take shortcuts that TLS
# lanes cannot (direct socket reads and writes on the demand lane), so they
# get their own runs: a 256 MiB migration with 8 faulting threads, and a
# link cut inside a private network namespace (every packet of the peer
# port dropped for 5 s) that the direct reader must notice by its timeout.
. "$SRC/tests/lib.sh"
need_root
export UFFDD_TEST_INSECURE=1
migrate 256M 2 8
kill "$WD"

command -v nft >/dev/null || skip "nft (nftables) missing for the link-cut half"
make_netns
start_daemon src2 --insecure --bulk-rate 8M
start_daemon dst2 --insecure
start_workload WS source --size 64M --threads 1 --base 0x510000000000
start_workload WD dest --size 64M --threads 4 --pace-us 1500 --base 0x510000000000
RANGE=510000000000-510004000000
ID=$("$CLIENT" --control "$src2_SOCK" export "$WS" --range "$RANGE")
H_SRC=$("$MEMHASH" "$WS" 0x510000000000 0x510004000000)
"$CLIENT" --control "$dst2_SOCK" attach "$WD" --from "127.0.0.1:$src2_PORT" \
	--id "$ID" --range "$RANGE" >/dev/null
kill -USR1 "$WD"
sleep 1.5
cut_link "$src2_PORT"
sleep 5
heal_link
"$CLIENT" --control "$dst2_SOCK" wait "$ID" --timeout 300 >/dev/null || fail "no completion after the cut"
wait_verified WD
H_DST=$("$MEMHASH" "$WD" 0x510000000000 0x510004000000)
[ "$H_SRC" = "$H_DST" ] || fail "destination differs after the cut"
"$CLIENT" --control "$dst2_SOCK" status "$ID" --json | grep -q '"reconnects":[1-9]' ||
	fail "the plaintext demand lane did not notice the cut"
