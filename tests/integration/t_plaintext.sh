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
paced_migration src2 dst2 64M 0x510000000000
sleep 1.5
cut_link "$src2_PORT"
sleep 5
heal_link
paced_finish dst2
"$CLIENT" --control "$dst2_SOCK" status "$ID" --json | grep -q '"reconnects":[1-9]' ||
	fail "the plaintext demand lane did not notice the cut"
