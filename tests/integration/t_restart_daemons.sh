#!/usr/bin/env bash
# Each daemon is killed with SIGKILL mid-migration and started again: the
# destination daemon re-takes the target's userfaultfd and rebuilds its page
# states from the target's pagemap; the source daemon re-exports its
# still-frozen process. Both migrations complete byte-exact. Then the
# destination daemon dies while the target's forked child still misses
# pages: the restarted daemon takes the child's uffd up again too, and the
# child's own check finds every page right. And once after the target
# moved part of its memory (mremap) while pages were missing: the restarted
# daemon knows where they went. And once after the target discarded pages
# that had not arrived (madvise): the restarted daemon still never puts the
# source's bytes there (they read as zeros). And once after a forked child
# alone discarded such pages: the same holds in the child, and the root's
# migration survives a state file saved on the child's event. And once
# after the target forked and exited: the restarted daemon serves the
# child alone. And once with a target that exits while the destination
# daemon is down: the restarted daemon finds it gone and serves its child.
. "$SRC/tests/lib.sh"
need_root
make_hosts

one() {
	local victim=$1 base=$2 dargs=${3:-} end range id h_src h_dst
	end=$(printf '0x%x' $((base + (128 << 20))))
	range=$(printf '%x-%x' $((base)) $((end)))
	start_workload WS source --size 128M --threads 2 --base "$base"
	# shellcheck disable=SC2086
	start_workload WD dest --size 128M --threads 4 --pace-us 400 --base "$base" $dargs
	id=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range")
	src_hash h_src "$WS" "$base" "$end"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$id" --range "$range" >/dev/null
	kill -USR1 "$WD"
	CHILD=
	case $dargs in *fork-exit*) idle_child WD ;; esac
	sleep 1.5
	"$CLIENT" --control "$dst_SOCK" status "$id" --json | grep -q '"state":"running"' ||
		fail "migration not running when the $victim daemon is killed"
	# A wait already running rides out the destination's restart.
	bgwait=
	if [ "$victim" = dst ]; then
		"$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 300 >"$T/bgwait.out" 2>&1 &
		bgwait=$!
		sleep 0.3
	fi
	info "killing the $victim daemon"
	kill_daemon "$victim"
	if [ "$dargs" = "--event fork-exit-late" ]; then
		# The target exits while no destination daemon runs.
		kill -USR2 "$WD"
		for _ in $(seq 100); do
			[ "$(proc_state "$WD" 2>/dev/null)" = "" ] ||
				[ "$(proc_state "$WD")" = Z ] && break
			sleep 0.1
		done
	fi
	sleep 1
	restart_daemon "$victim"
	info "$victim daemon restarted"
	"$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 300 >"$T/wait.out" ||
		fail "wait: $(cat "$T/wait.out")"
	if [ -n "$bgwait" ]; then
		rc=0
		wait "$bgwait" || rc=$?
		[ "$rc" = 0 ] || fail "a wait across the restart exited $rc: $(cat "$T/bgwait.out")"
		grep -q "lost uffdd" "$T/bgwait.out" || fail "the wait did not say it lost the daemon: $(cat "$T/bgwait.out")"
		info "a wait across the restart: $(grep 'lost uffdd' "$T/bgwait.out")"
	fi
	if [ -n "$CHILD" ]; then
		# The target is gone: its child holds the migrated memory.
		[ "$(dst_hash h_src "$CHILD" "$base" "$end")" = "$h_src" ] ||
			fail "the forked child differs from the source ($victim restart)"
		kill -USR1 "$CHILD"
	else
		wait_verified WD
	fi
	# A moved range is not where the source had it: the target's own
	# check (wait_verified) covers it at its new address.
	if [ -z "$CHILD" ] && [ "$dargs" != "--event remap" ] &&
		[ "$dargs" != "--event remove" ]; then
		h_dst=$(dst_hash h_src "$WD" "$base" "$end")
		[ "$h_src" = "$h_dst" ] || fail "destination differs from the source ($victim restart)"
	fi
	"$CLIENT" --control "$src_SOCK" wait "$id" --timeout 60 >/dev/null ||
		fail "source side did not complete ($victim restart)"
	info "$victim restart: complete, byte-exact"
	if [ "${dargs#--event fork}" != "$dargs" ]; then
		wait_child_verified WD "forked child"
		grep -q "restored forked process" "$T/dst.log" ||
			fail "the forked child was not restored"
	fi
	kill "$WD" 2>/dev/null || [ -n "$CHILD" ]
}

start_daemon src --bulk-rate 16M
start_daemon dst
one dst 0x500000000000
one src 0x510000000000
one dst 0x520000000000 "--event fork"
one dst 0x530000000000 "--event remap"
one dst 0x540000000000 "--event remove"
one dst 0x550000000000 "--event fork-remove"
one dst 0x560000000000 "--event fork-exit"
grep -q "restored migration .* for the processes that process [0-9]* forked" "$T/dst.log" ||
	fail "the migration of the exited target's child was not restored as such"
one dst 0x570000000000 "--event fork-exit-late"
grep -q "process [0-9]* exited; taking up the processes it forked" "$T/dst.log" ||
	fail "the target that exited while the daemon was down was not seen as gone"
grep -q "restored migration" "$T/dst.log" || fail "destination did not restore"
grep -q "restored export" "$T/src.log" || fail "source did not restore"
