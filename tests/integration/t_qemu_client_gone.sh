#!/usr/bin/env bash
# migrate-qemu goes away after the destination guest runs, while its RAM
# is still arriving: first its --timeout expires, then it is interrupted
# (SIGINT, as a Ctrl-C). The guest runs on the destination by then, so its
# RAM must go on arriving: the process that serves the source RAM files
# outlives the client, the migration completes with no page lost, and the
# guest's memory check sees no mismatch. (Before, the client killed that
# process on its way out: the source daemon failed the migration and the
# running guest's missing pages were poisoned.)
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
# Slow enough that the guest runs on the destination for seconds before
# all of its RAM is there.
start_daemon src --bulk-rate 32M
start_daemon dst

# gives_up FROM TO HOW: migrate-qemu from FROM to TO, ended by HOW
# (timeout or sigint) after TO runs; the migration must still complete.
gives_up() {
	local from=$1 to=$2 how=$3 cpid id holder json tag rc=0
	if [ "$how" = timeout ]; then
		if SAN_WHO="gives_up $how" checked "$T/m.out" \
			"$CLIENT" migrate-qemu --src-qmp "$T/$from.qmp" --dst-qmp "$T/$to.qmp" \
			--src-control "$src_SOCK" --dst-control "$dst_SOCK" \
			--src-peer "$src_ADDR:$src_PORT" --timeout 2; then
			fail "migrate-qemu finished within 2 s: the test proves nothing"
		fi
	else
		# Emptied before the client starts: the shell opens the client's
		# output only once the background job runs, and the loop below
		# must not find the last run's "guest running" there (it then
		# sent the SIGINT before the client handled it, and the client,
		# a background job, ignored it and finished).
		: >"$T/m.out"
		tag=gives_up$((SAN_N += 1))
		ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$SAN/$tag \
			"$CLIENT" migrate-qemu --src-qmp "$T/$from.qmp" --dst-qmp "$T/$to.qmp" \
			--src-control "$src_SOCK" --dst-control "$dst_SOCK" \
			--src-peer "$src_ADDR:$src_PORT" --timeout 300 >"$T/m.out" 2>&1 &
		cpid=$!
		for _ in $(seq 600); do
			grep -q 'destination guest running' "$T/m.out" && break
			sleep 0.1
		done
		kill -INT "$cpid"
		wait "$cpid" || rc=$?
		san_check "gives_up $how" "$tag" "$rc" "$T/m.out"
		[ "$rc" != 0 ] || fail "migrate-qemu finished before the SIGINT: the test proves nothing"
	fi
	grep -q 'destination guest running' "$T/m.out" || fail "$how: $(cat "$T/m.out")"
	id=$(sed -n 's/.*migration \([0-9a-f]\{32\}\).*/\1/p' "$T/m.out" | head -n 1)
	[ -n "$id" ] || fail "$how: no migration ID in: $(cat "$T/m.out")"
	# The RAM holder is a fork of the client, with its command line: gone
	# at completion (the source daemon kills it), else at cleanup.
	holder=$(pgrep -f -n "$CLIENT migrate-qemu --src-qmp $T/$from.qmp" || true)
	[ -n "$holder" ] && on_cleanup "kill -9 $holder 2>/dev/null"
	info "$how: client gone; $(grep -c . "$T/m.out") lines said, the last: $(tail -n 1 "$T/m.out")"
	SAN_WHO="gives_up $how: wait" checked "$T/wait.out" "$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 300 ||
		fail "$how: the migration did not complete after the client went: $(cat "$T/wait.out")"
	json=$("$CLIENT" --control "$dst_SOCK" status "$id" --json)
	echo "$json" | grep -q '"pages_lost":0,' || fail "$how: pages lost: $json"
	runs_on "$to" 3
	info "$how: complete, no page lost; $to: $(tail -n 1 "$T/$to.serial")"
}

qemu a
runs_on a 2
qemu b -incoming defer
gives_up a b timeout
grep -q "goes on in the daemons" "$T/m.out" || fail "the client did not say the migration goes on: $(cat "$T/m.out")"
qemu c -incoming defer
gives_up b c sigint
