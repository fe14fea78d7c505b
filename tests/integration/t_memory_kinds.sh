#!/usr/bin/env bash
# The memory-kind matrix: private anonymous, shared anonymous, memfd and a
# tmpfs file, each with pages resident, swapped out (zram), never touched
# and explicitly zero-filled on the source, migrated byte-exact, with both
# classification paths (PAGEMAP_SCAN and batched pagemap reads). Shared
# memory is classified from its backing file: its swapped-out pages look
# exactly like never-touched ones in pagemap.
. "$SRC/tests/lib.sh"
need_root
set_up_zram_swap 1G
for how in scan read; do
	args=""
	[ "$how" = read ] && args=--no-pagemap-scan
	for kind in anon shared memfd tmpfs; do
		info "kind $kind, classification by $how"
		SRC_DAEMON_ARGS=$args migrate 64M 2 4 \
			"--kind $kind --pageout-every 3 --zero-every 16" \
			"--kind $kind --zero-every 16"
		swapped=$(sed -n 's/^swapped //p' "$T/WS.out")
		info "$kind: $swapped pages swapped out when ready; at attach $SRC_SWAPPED swapped, $SRC_NONE neither present nor swapped in pagemap"
		[ "${swapped:-0}" -gt 500 ] || fail "$kind: too few pages swapped out ($swapped)"
		# Still out at attach. Anonymous memory says so in pagemap;
		# shared memory shows none, like its 1024 never-touched pages.
		if [ "$kind" = anon ]; then
			[ "$SRC_SWAPPED" -ge "$swapped" ] ||
				fail "$kind: only $SRC_SWAPPED of $swapped swapped pages still out at attach"
		else
			[ $((SRC_SWAPPED + SRC_NONE)) -ge $((swapped + 1024)) ] ||
				fail "$kind: $SRC_SWAPPED + $SRC_NONE pages not present at attach, fewer than $swapped swapped + 1024 never touched"
		fi
		kill "$WD"
	done
done
