#!/usr/bin/env bash
# zero-detect: a source started with --zero-detect yes sends the data pages
# whose bytes are all zero (written with zeros on purpose by the workload,
# one page in 16) as ZERO markers. The destination must still end byte-exact
# (both hashes and its own per-word check), status must count the pages so
# sent, and the bytes on the wire must shrink by them (demand answers,
# which may repeat a page, aside). Private anonymous,
# shared anonymous and memfd memory (UFFDIO_ZEROPAGE on anon and shmem).
. "$SRC/tests/lib.sh"
need_root
pages=$((64 * 1024 * 1024 / 4096)) zeroed=$((64 * 1024 * 1024 / 4096 / 16))
for kind in anon shared memfd; do
	info "kind $kind"
	SRC_DAEMON_ARGS="--zero-detect yes" migrate 64M 2 4 \
		"--kind $kind --zero-every 16" "--kind $kind --zero-every 16"
	json=$("$CLIENT" --control "$src_SOCK" status "$MIG_ID" --json)
	zc=$(echo "$json" | sed 's/.*"zero_content_pages":\([0-9]*\).*/\1/')
	bytes=$(echo "$json" | sed 's/.*"bytes":\([0-9]*\).*/\1/')
	demand=$(echo "$json" | sed 's/.*"demand_pages":\([0-9]*\).*/\1/')
	info "$kind: $zc pages found all zero, $bytes bytes of page data sent"
	# Pages a destination thread asked for on demand go as data: not all
	# of the zeroed pages need to be found, but most are (the bulk lane
	# sends far more than the threads touch first).
	[ "$zc" -gt $((zeroed / 2)) ] && [ "$zc" -le "$zeroed" ] ||
		fail "$kind: $zc pages sent as zero content, expected up to $zeroed"
	# A demand answer may repeat a page the bulk lane sent already.
	[ "$bytes" -le $(((pages - zc + demand) * 4096)) ] ||
		fail "$kind: $bytes bytes sent for $((pages - zc)) data pages" \
			"and $demand pages on demand"
	"$CLIENT" --control "$src_SOCK" status "$MIG_ID" |
		grep -q "of them data found all zero" ||
		fail "$kind: the text status does not show the zero-content pages"
	kill "$WD"
done
