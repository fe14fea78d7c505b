#!/usr/bin/env bash
# The split (docs/privsep.md), seen from outside. During a TLS migration
# the engine of each daemon holds the peer connections, and it opens no
# file of the migrated processes under /proc that needs the right to
# ptrace them (maps, pagemap, map_files, mem, task/*/syscall): the
# privileged part opens them for the grant and hands the descriptors over,
# for the target's forked child too (a grant the privileged part opened as
# the target's child).
# The source's engine reads the pages through the /proc/PID/mem it was
# given, never with process_vm_readv (checked at every call). The
# destination's engine never ptraces the target nor its forked child: the
# privileged part stops the target, has it make its userfaultfd, empties
# its regions, and hands the child a copy of its own.
# An engine killed by SIGSEGV mid-migration, on either side, pauses its
# migrations loudly; the privileged part starts a new engine, which takes
# them up by the grants the privileged part kept (traced from its fork:
# it ptraces nothing, copies no descriptor out of a process, reads and
# writes no process's memory with process_vm_*, opens no ptrace-checked
# file), and each completes byte-exact. So does a migration whose daemon
# (either side) is killed whole and started again: the privileged part
# opens the last one's grants from its records, and the new engine acts
# by them alone. Then the daemons serve a new migration byte-exact.
. "$SRC/tests/lib.sh"
need_root
command -v strace >/dev/null || skip "strace missing (Debian package strace)"
command -v ss >/dev/null || skip "ss missing (Debian package iproute2)"
# A SIGSEGV sent from outside is no memory bug: the sanitizers let it kill.
export ASAN_OPTIONS=$ASAN_OPTIONS:handle_segv=0
export UBSAN_OPTIONS=$UBSAN_OPTIONS:handle_segv=0
# Bulk at 8 MiB/s: a migration of 64 MiB lasts long enough to look at.
SRC_DAEMON_ARGS="--bulk-rate 8M"
start_daemon src $SRC_DAEMON_ARGS
start_daemon dst
BASE=0x500000000000
END=$(printf '0x%x' $((BASE + (64 << 20))))
RANGE=${BASE#0x}-${END#0x}

# trace NAME: strace of NAME's engine, its opens, process_vm_readv and
# ptrace calls, into $T/NAME.strace.
trace() {
	local eng
	eng=$(engine_pid "$1")
	[ -n "$eng" ] || fail "daemon $1 has no engine"
	strace -f -qq -e trace=open,openat,process_vm_readv,ptrace -o "$T/$1.strace" -p "$eng" &
	eval "${1}_STRACE=$!"
	PIDS+=("$!")
	for _ in $(seq 100); do
		[ "$(awk '/^TracerPid:/ {print $2}' "/proc/$eng/status")" != 0 ] && return
		sleep 0.05
	done
	fail "strace did not attach to the engine of $1"
}

info "a TLS migration: the engines hold the peer connections and open no /proc file of the processes"
start_workload WS source --size 64M --threads 2 --kind memfd
start_workload WD dest --size 64M --threads 4 --prefault --pace-us 200 --kind memfd \
	--event fork
trace src
trace dst
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
H_SRC=$("$MEMHASH" "$WS" $BASE "$END")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" || fail "attach: $(cat "$T/attach.out")"
kill -USR1 "$WD"
sleep 0.5
for n in src dst; do
	engine_holds_peers $n "$src_PORT"
done
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" || fail "wait: $(cat "$T/wait.out")"
wait_verified WD
wait_child_verified WD "the target's forked child"
[ "$("$MEMHASH" "$WD" $BASE "$END")" = "$H_SRC" ] || fail "the destination differs from the source"
kill "$src_STRACE" "$dst_STRACE"
wait "$src_STRACE" "$dst_STRACE" 2>/dev/null || true
for n in src dst; do
	grep -E "\"/proc/[0-9]+/(maps|pagemap|mem|map_files/|task/[0-9]+/syscall)" \
		"$T/$n.strace" >"$T/$n.opened" && fail "the engine of $n opened by itself: $(head -n 5 "$T/$n.opened")"
	grep -q . "$T/$n.strace" || fail "no open of the engine of $n was traced"
done
grep -q "process_vm_readv(" "$T/src.strace" &&
	fail "the source's engine read pages with process_vm_readv: $(grep -m 3 process_vm_readv "$T/src.strace")"
grep "ptrace(" "$T/dst.strace" >"$T/dst.ptrace" &&
	fail "the destination's engine ptraced the target or its child: $(head -n 3 "$T/dst.ptrace")"
kill -9 "$WD"

# trace_new NAME: strace of what NAME's privileged part starts from now on
# (the next engine, from its fork), into $T/NAME.new.strace; its own tids
# in NAME_TIDS.
trace_new() {
	local priv
	priv=$(eval echo "\$${1}_PID")
	eval "${1}_TIDS=\"$(ls "/proc/$priv/task" | tr '\n' ' ')\""
	strace -f -qq -e trace=open,openat,process_vm_readv,process_vm_writev,ptrace,pidfd_getfd \
		-o "$T/$1.new.strace" -p "$priv" &
	eval "${1}_STRACE=$!"
	PIDS+=("$!")
	for _ in $(seq 100); do
		[ "$(awk '/^TracerPid:/ {print $2}' "/proc/$priv/status")" != 0 ] && return
		sleep 0.05
	done
	fail "strace did not attach to the privileged part of $1"
}

# new_engine_clean NAME ENGINE: the engine traced by trace_new (pid
# ENGINE) neither ptraced, nor copied a descriptor out of, nor read or
# wrote with process_vm_*, nor opened a ptrace-checked /proc file of, any
# other process: it took its migrations up by the grants the privileged
# part kept.
new_engine_clean() {
	local st tids
	st=$(eval echo "\$${1}_STRACE")
	tids=$(eval echo "\$${1}_TIDS")
	kill "$st"
	wait "$st" 2>/dev/null || true
	cp "$T/$1.new.strace" "$T/$1.new.engine"
	for t in $tids; do
		sed -i "/^$t /d" "$T/$1.new.engine"
	done
	grep -q . "$T/$1.new.engine" || fail "$1: nothing of the new engine was traced"
	grep -E "ptrace\(|process_vm_(read|write)v\(|pidfd_getfd\(" "$T/$1.new.engine" >"$T/$1.new.bad" &&
		fail "$1: the new engine acted on a process itself: $(head -n 3 "$T/$1.new.bad")"
	grep -E "\"/proc/[0-9]+/(maps|pagemap|mem|map_files/|task/[0-9]+/syscall)" \
		"$T/$1.new.engine" | grep -v "\"/proc/$2/" >"$T/$1.new.bad" &&
		fail "$1: the new engine opened by itself: $(head -n 3 "$T/$1.new.bad")"
	! grep -q "no grant kept" "$T/$1.log" ||
		fail "$1: the new engine found no grant: $(grep -m 1 "no grant kept" "$T/$1.log")"
}

# segv VICTIM: a migration (paced_migration) whose VICTIM daemon's engine
# is killed by SIGSEGV while it runs; it is taken up again, by the grants
# the privileged part kept (the new engine traced), and completes
# byte-exact.
segv() {
	local victim=$1 eng new
	paced_migration src dst 64M $BASE
	sleep 1
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json | grep -q '"state":"running"' ||
		fail "migration not running when the $victim engine is killed"
	trace_new "$victim"
	eng=$(engine_pid "$victim")
	kill -SEGV "$eng"
	for _ in $(seq 200); do
		grep -q "engine killed by signal 11" "$T/$victim.log" && break
		sleep 0.05
	done
	grep -q "engine killed by signal 11 .*paused" "$T/$victim.log" ||
		fail "$victim: the engine's death was not told: $(tail -n 5 "$T/$victim.log")"
	for _ in $(seq 300); do
		new=$(engine_pid "$victim")
		[ -n "$new" ] && [ "$new" != "$eng" ] && break
		sleep 0.05
	done
	[ -n "$new" ] && [ "$new" != "$eng" ] || fail "$victim: no new engine"
	info "$victim: engine $eng killed by SIGSEGV, engine $new took over"
	paced_finish dst
	new_engine_clean "$victim" "$new"
	kill -9 "$WD"
	kill -9 "$WS" 2>/dev/null || true
}
segv dst
segv src

# whole VICTIM: both parts of VICTIM killed (SIGKILL, as a crash) while a
# migration runs, and the daemon started again: its privileged part opens
# the last one's grants again from its records, before it starts the
# engine; that engine, traced from its fork (strace of this shell, which
# starts the daemon), takes the migration up by them and acts on no
# process itself; the migration completes byte-exact.
whole() {
	local victim=$1 st eng
	paced_migration src dst 64M $BASE
	sleep 1
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json | grep -q '"state":"running"' ||
		fail "migration not running when the $victim daemon is killed"
	kill_daemon "$victim"
	strace -f -qq -e trace=execve,open,openat,process_vm_readv,process_vm_writev,ptrace,pidfd_getfd \
		-o "$T/$victim.whole.strace" -p $$ &
	st=$!
	PIDS+=("$st")
	for _ in $(seq 100); do
		[ "$(awk '/^TracerPid:/ {print $2}' "/proc/$$/status")" != 0 ] && break
		sleep 0.05
	done
	restart_daemon "$victim"
	# Ready: it restored what it could first.
	eng=$(engine_pid "$victim")
	kill "$st"
	wait "$st" 2>/dev/null || true
	grep "^$eng " "$T/$victim.whole.strace" >"$T/$victim.whole.engine" || true
	grep -qE "^$eng +execve\(" "$T/$victim.whole.engine" ||
		fail "$victim: the new engine ($eng) was not traced from its start"
	grep -E "ptrace\(|process_vm_(read|write)v\(|pidfd_getfd\(" "$T/$victim.whole.engine" >"$T/$victim.whole.bad" &&
		fail "$victim: the restarted daemon's engine acted on a process itself: $(head -n 3 "$T/$victim.whole.bad")"
	grep -E "\"/proc/[0-9]+/(maps|pagemap|mem|map_files/|task/[0-9]+/syscall)" \
		"$T/$victim.whole.engine" | grep -v "\"/proc/$eng/" >"$T/$victim.whole.bad" &&
		fail "$victim: the restarted daemon's engine opened by itself: $(head -n 3 "$T/$victim.whole.bad")"
	grep -q "grant record .* granted again" "$T/$victim.log" ||
		fail "$victim: no grant opened again from its record: $(tail -n 5 "$T/$victim.log")"
	info "$victim: daemon killed and started again; its engine $eng took the migration up by grant"
	paced_finish dst
	kill -9 "$WD"
	kill -9 "$WS" 2>/dev/null || true
}
whole dst
whole src
# The killed engines' sanitizer runtimes wrote nothing; their deaths are
# no exit status of the daemons' (each part ends cleanly at SIGTERM).

info "a new migration after both engines were replaced"
migrate 32M 2 2 >/dev/null
info "byte-exact"
