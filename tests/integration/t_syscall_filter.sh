#!/usr/bin/env bash
# build: plain
# The unit's SystemCallFilter= allows every system call the daemons make.
# systemd cannot run as PID 1 here, so the filter is checked the other way
# round: both daemons run under strace through migrations of several
# memory kinds (TLS lanes, attach with its ptrace injection, a target that
# forks, a source kept alive, shared hugetlb when huge pages can be had,
# a snapshot and a restore from it, its image read through io_uring),
# status queries and a restart of the destination daemon, and every system
# call name strace saw must be in the set systemd-analyze expands the
# unit's filter to; the engine runs as the packaged configuration says
# (engine-user), and one is started under the trace. A call outside it would kill or fail the daemon under
# systemd. On the plain build, as a packaged daemon runs (AddressSanitizer
# makes calls of its own).
. "$SRC/tests/lib.sh"
need_root
command -v strace >/dev/null || skip "strace missing (Debian package strace)"
command -v systemd-analyze >/dev/null || skip "systemd-analyze missing (Debian package systemd)"
# Run from a sanitizer build alone (make check there, not tests/setup.sh):
# LeakSanitizer cannot work under strace and fails the daemon's exit.
[ "$SANITIZED" = 0 ] ||
	skip "needs the plain build (PLAIN_BUILDDIR, as tests/setup.sh check sets it): LeakSanitizer does not run under strace"

# The filter as the unit states it, groups expanded (they nest).
filter=$(sed -n 's/^SystemCallFilter=//p' "$SRC/systemd/uffdd.service")
[ -n "$filter" ] || fail "the unit has no SystemCallFilter="
declare -A seen allowed
todo=($filter)
while [ ${#todo[@]} -gt 0 ]; do
	x=${todo[0]}
	todo=("${todo[@]:1}")
	[ -n "${seen[$x]:-}" ] && continue
	seen[$x]=1
	case $x in
	@*)
		members=$(systemd-analyze syscall-filter "$x" 2>/dev/null |
			sed -n 's/^    \([@a-z0-9_-]*\).*/\1/p')
		[ -n "$members" ] || fail "systemd-analyze does not know $x"
		for y in $members; do todo+=("$y"); done
		;;
	*) allowed[$x]=1 ;;
	esac
done
info "the unit's filter allows ${#allowed[@]} system calls"

TRACES=() TRACERS=()
trace() {
	local name=$1 pid out
	pid=$(eval echo "\$${name}_PID")
	out=$T/$name.strace.$pid
	strace -f -qq -o "$out" -p "$pid" 2>"$T/$name.strace.err" &
	PIDS+=($!)
	TRACERS+=($!)
	TRACES+=("$out")
	# Attached once strace has written its first line.
	for _ in $(seq 100); do
		[ -s "$out" ] && return
		sleep 0.05
	done
	# An idle daemon may make no call for a while: poke its control socket.
	SAN_WHO="status of $name" checked "$T/poke.out" "$CLIENT" --control "$(eval echo "\$${name}_SOCK")" status || true
	for _ in $(seq 100); do
		[ -s "$out" ] && return
		sleep 0.05
	done
	fail "strace did not attach to the $name daemon: $(cat "$T/$name.strace.err")"
}

# As the packaged configuration runs them: the engine as its own user.
eu=$(sed -n 's/^engine-user //p' "$SRC/systemd/uffdd.conf")
if [ -n "$eu" ]; then
	need_engine_user
	export UFFDD_TEST_ENGINE_USER=$eu
fi
# migrate() keeps a daemon only when its arguments stay the same.
export SRC_DAEMON_ARGS="--bulk-rate 16M"
start_daemon src $SRC_DAEMON_ARGS
start_daemon dst
trace src
trace dst
# An engine started under the trace (the first one was before it): the
# calls with which it confines itself are seen too.
old=$(engine_pid dst)
kill -KILL "$old"
for _ in $(seq 200); do
	new=$(engine_pid dst)
	[ -n "$new" ] && [ "$new" != "$old" ] &&
		"$CLIENT" --control "$dst_SOCK" status >/dev/null 2>&1 && break
	sleep 0.05
done
[ -n "$new" ] && [ "$new" != "$old" ] || fail "no new engine after SIGKILL of $old"
[ -z "$eu" ] || wait_log dst "engine confined" 2

migrate 16M 2 4
kill "$WD"
migrate 16M 1 4 "--kind memfd --pageout-every 5" "--kind memfd"
kill "$WD"
migrate 16M 1 4 "" "--event fork"
wait_child_verified WD "forked child"
kill "$WD"
EXPORT_ARGS=--keep-source migrate 8M 1 2
kill "$WD" "$WS"
"$CLIENT" --control "$dst_SOCK" status >/dev/null
"$CLIENT" --control "$dst_SOCK" status --json >/dev/null
if reserve_huge_pages 24; then
	migrate 16M 1 2 "--kind hugetlb-shared" "--kind hugetlb-shared"
	kill "$WD"
else
	skip_part "shared hugetlb: no huge pages to be had"
fi

# A snapshot, and a restore from it: image reads go through io_uring.
start_workload WI source --size 8M --threads 1 --base 0x520000000000
"$CLIENT" --control "$src_SOCK" snapshot "$WI" --to "$T/i.img" \
	--range 520000000000-520000800000 >/dev/null || fail "snapshot"
start_workload WD dest --size 8M --threads 2 --base 0x520000000000
"$CLIENT" --control "$dst_SOCK" attach "$WD" --image "$T/i.img" \
	--range 520000000000-520000800000 --wait >/dev/null || fail "attach --image"
kill -USR1 "$WD"
wait_verified WD >/dev/null
kill "$WD"

# A destination daemon restarted in the middle of a migration restores it.
paced_migration src dst 128M 0x510000000000
sleep 1
kill_daemon dst
restart_daemon dst
trace dst
paced_finish dst
grep -q "restored migration" "$T/dst.log" || fail "the destination restored nothing"
kill "$WD"
# Each strace detached (SIGINT) and gone: its output is complete.
kill -INT "${TRACERS[@]}" 2>/dev/null || true
for p in "${TRACERS[@]}"; do
	wait "$p" 2>/dev/null || true
done

# Every call strace saw, by name ("PID name(args) = ...").
used=$(sed -n 's/^[0-9]* *\([a-z_][a-z0-9_]*\)(.*/\1/p' "${TRACES[@]}" | sort -u)
[ -n "$used" ] || fail "strace saw no system calls"
info "the daemons made $(echo "$used" | wc -l) different system calls"
bad=()
for c in $used; do
	[ -n "${allowed[$c]:-}" ] || bad+=("$c")
done
[ ${#bad[@]} -eq 0 ] || fail "outside the unit's SystemCallFilter: ${bad[*]}"
info "all of them allowed: $(echo $used)"
