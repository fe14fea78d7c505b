#!/usr/bin/env bash
# The target changes its own memory while pages are still missing: it
# discards a range (madvise), unmaps one, moves one (mremap), makes part of
# one read-only (mprotect: the mapping splits off the bulk lane's frame
# grid, and a frame across the split must still go in), or forks (the
# child checks every page too, most of them still missing), also beside a
# child it had before the migration, or with a child that discards pages
# at once, punches a hole in its shared memory
# file, or grows a region in place (no event at all for these two). The result
# is what the target would have seen had all its memory been local: the
# discarded pages read as zeros (never the source's stale bytes), the moved
# pages hold the source's bytes at their new address, every other page is
# the source's. Checked by the target itself against the pattern.
. "$SRC/tests/lib.sh"
need_root
start_daemon src --bulk-rate 4M
start_daemon dst
n=0
# one KIND EVENT [DEST ARGS...]: one migration whose target does EVENT.
one() {
	local kind=$1 ev=$2 base end range id
	shift 2
	n=$((n + 1))
	base=$((0x500000000000 + n * 0x100000000))
	end=$((base + (32 << 20)))
	range=$(printf '%x-%x' "$base" "$end")
	start_workload WS source --size 32M --threads 1 --base "$base" --kind "$kind"
	start_workload WD dest --size 32M --threads 4 --base "$base" --kind "$kind" --event "$ev" "$@"
	id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range")
	src_hash h_src "$WS" "$base" "$end"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$id" --range "$range" >/dev/null
	kill -USR1 "$WD"
	if [ "$ev" = grow ]; then
		for _ in $(seq 600); do
			grep -q '^grown' "$T/WD.out" && break
			sleep 0.1
		done
		"$CLIENT" --control "$dst_SOCK" status "$id" --json | grep -q '"state":"running"' ||
			fail "$kind grow: the new pages waited for the migration to end"
	fi
	case $ev in fork-idle | fork-exit) idle_child WD ;; *) CHILD= ;; esac
	checked "$T/wait.out" "$CLIENT" --control "$dst_SOCK" wait "$id" --timeout "${WAIT_SECS:-120}" ||
		fail "$kind $ev $*: $(cat "$T/wait.out")"
	if [ -n "$CHILD" ]; then
		# Complete while the child idled: it has every page already.
		[ "$(dst_hash h_src "$CHILD" "$base" "$end")" = "$h_src" ] ||
			fail "$kind $ev: the forked child differs from the source"
		kill -USR1 "$CHILD"
	fi
	if [ "$ev" = fork-exit ]; then
		grep -q "target process $WD exited; 1 process it forked goes on" "$T/dst.log" ||
			fail "$kind $ev: the daemon did not say the target exited"
		"$CLIENT" --control "$dst_SOCK" status "$id" | grep -q "target process $WD exited; the processes it forked migrate on" ||
			fail "$kind $ev: status does not say the target exited"
	else
		wait_verified WD >/dev/null
		info "$kind, target does $ev $* while pages are missing: $(grep '^verified' "$T/WD.out")"
	fi
	case $ev in fork*) wait_child_verified WD "$kind $ev $*" ;; esac
	# Each fault is served once: a thread that faults again and again on
	# one page spins until the migration ends.
	faults=$("$CLIENT" --control "$dst_SOCK" status "$id" --json |
		sed -n 's/.*"demand_faults":\([0-9]*\).*/\1/p')
	[ "${faults:-0}" -le 16384 ] || fail "$kind $ev $*: $faults faults for 8192 pages"
	info "$kind $ev $*: $faults demand faults"
	if [ "$ev" = remove ]; then
		disc=$("$CLIENT" --control "$dst_SOCK" status "$id" --json |
			sed -n 's/.*"discarded_pages":\([0-9]*\).*/\1/p')
		[ "${disc:-0}" -gt 0 ] || fail "$kind remove: status counts no discarded page"
		info "$kind remove: status counts $disc discarded pages"
	fi

	kill "$WD" 2>/dev/null || [ "$ev" = fork-exit ]
}
for kind in ${KINDS-anon memfd}; do
	for ev in ${EVENTS:-remove unmap remap protect fork}; do
		one "$kind" "$ev"
	done
done
# Shared memory: the target fetches pages, then punches a hole in the file
# under them (fallocate: no uffd event says so): they read as zeros, as
# they would have without a migration. (Taken for present, a thread
# faulting there was woken, faulted again, and so on for good.)
one memfd punch
# The target grows a region in place (mremap, no event): the new pages are
# no page of the source's and read as zeros at once. (Their faults were
# dropped as outside every region: the thread slept until the end.)
one anon grow
# A target that had a child before the migration (holding every page)
# forks another during it: the fork event is the new child's. (Taken for
# the old one, the new child's pages counted as present, its uffd was
# closed at once, and its missing pages read as zeros.)
one anon fork --idle-child
# The child of a fork discards missing pages at once (madvise). It waits in
# the kernel until its uffd's event is read, while the destination, handed
# the child's uffd, stops the child to give it a copy. (The destination
# waited for that stop without reading: both waited for good, and with
# them every migration of the daemon.)
one anon fork-remove
# The target forks and exits at once, as a daemon detaches: its child is
# migrated alone, on the target's lanes, and the migration completes
# while the child idles. (The target's exit ended the migration: its
# children were left waiting on lanes that were gone.)
for kind in ${KINDS-anon memfd}; do
	one "$kind" fork-exit
done
