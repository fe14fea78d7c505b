#!/usr/bin/env bash
# Authorization rests on what the kernel vouches for, not on what a caller
# or a pid number says:
# - uid 65534 inside a user namespace of its own (where it is "root" with
#   every capability) may not export, attach to or see a root process
#   through a socket opened to everyone;
# - a target that runs another program (a setuid one, or the same one
#   again) between the attach's check and the injection is not touched.
. "$SRC/tests/lib.sh"
need_root
command -v setpriv >/dev/null || skip "setpriv missing (util-linux)"
command -v unshare >/dev/null || skip "unshare missing (util-linux)"
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
"${NOBODY[@]}" true 2>/dev/null || skip "setpriv cannot switch to uid 65534 here"
chmod 711 "$T"
"${NOBODY[@]}" test -x "$CLIENT" || skip "uid 65534 cannot run $CLIENT (build directory not readable)"

no_uffd() {
	if ls -l "/proc/$1/fd" 2>/dev/null | grep -q 'anon_inode:\[userfaultfd\]'; then
		fail "$2: process $1 was given a userfaultfd"
	fi
}

start_daemon src --control-mode 0666
start_daemon dst --control-mode 0666
RANGE=500000000000-500001000000
start_workload WS source --size 16M --threads 1

# 1. A user namespace of the caller's own gives nothing here.
if "${NOBODY[@]}" unshare -Ur true 2>/dev/null; then
	USERNS=("${NOBODY[@]}" unshare -Ur)
	[ "$("${USERNS[@]}" id -u)" = 0 ] || fail "unshare -Ur did not map uid 0"
	expect_error "export from a user namespace" "permission denied" \
		"${USERNS[@]}" "$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE"
	[ "$(proc_state "$WS")" != T ] || fail "a refused export froze root's process"
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
	start_workload WD dest --size 16M --threads 1
	expect_error "attach from a user namespace" "permission denied" \
		"${USERNS[@]}" "$CLIENT" --control "$dst_SOCK" attach "$WD" \
		--from "$src_ADDR:$src_PORT" --id "$ID" --range "$RANGE"
	no_uffd "$WD" "attach from a user namespace"
	SAN_WHO="status from a user namespace" checked "$T/status.out" \
		"${USERNS[@]}" "$CLIENT" --control "$src_SOCK" status || true
	grep -q "${ID:0:8}" "$T/status.out" &&
		fail "a user namespace sees root's migration: $(cat "$T/status.out")"
	expect_error "status of root's ID from a user namespace" "unknown migration ID" \
		"${USERNS[@]}" "$CLIENT" --control "$src_SOCK" status "$ID"
	kill "$WD"
else
	skip_part "part 1 (user namespaces): unprivileged user namespaces are off here"
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
fi

# Connections to the source daemon's port (ports of earlier ones linger).
conns_to_src() {
	ss -tnH state established "( dport = :$src_PORT )" | wc -l
}

# 2. The target runs another program between the check and the injection.
# The source daemon is stopped so that the attach waits for its region
# table, with the check done; the target execs meanwhile.
# exec_between NAME PATTERN EXEC_PATH [RUN_AS...]
exec_between() {
	local name=$1 pat=$2 path=$3 n
	shift 3
	rm -f "$T/WX.out"
	"$@" "$WORKLOAD" dest --size 16M --threads 1 --exec-on-usr2 "$path" \
		>"$T/WX.out" 2>"$T/WX.log" &
	WX=$!
	PIDS+=("$WX")
	for _ in $(seq 200); do
		grep -q '^ready' "$T/WX.out" 2>/dev/null && break
		sleep 0.05
	done
	grep -q '^ready' "$T/WX.out" || fail "$name: workload not ready: $(cat "$T/WX.log")"
	# Both of its processes: the engine would answer meanwhile.
	kill -STOP $(daemon_pids src)
	local before now
	before=$(conns_to_src)
	local tag=exec_between$((SAN_N += 1)) rc=0
	ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$SAN/$tag \
		"$@" "$CLIENT" --control "$dst_SOCK" attach "$WX" --from "$src_ADDR:$src_PORT" \
		--id "$ID" --range "$RANGE" >"$T/attach.out" 2>&1 &
	local client=$!
	# The check is done once the destination has connected to the source.
	for _ in $(seq 200); do
		now=$(conns_to_src)
		[ "$now" -gt "$before" ] && break
		sleep 0.05
	done
	[ "$now" -gt "$before" ] || fail "$name: the destination never connected: $(cat "$T/attach.out")"
	kill -USR2 "$WX"
	for _ in $(seq 200); do
		n=$(grep -c '^ready' "$T/WX.out" 2>/dev/null || true)
		[ "${n:-0}" -ge 2 ] && break
		sleep 0.05
	done
	[ "${n:-0}" -ge 2 ] || fail "$name: target did not run its program again: $(cat "$T/WX.log")"
	kill -CONT $(daemon_pids src)
	wait "$client" || rc=$?
	san_check "exec_between $name" "$tag" "$rc" "$T/attach.out"
	[ "$rc" != 0 ] || fail "$name: attach succeeded into the program run since: $(cat "$T/attach.out")"
	grep -qi -- "$pat" "$T/attach.out" ||
		fail "$name: error does not say '$pat': $(cat "$T/attach.out")"
	info "$name: $(cat "$T/attach.out")"
	no_uffd "$WX" "$name"
	[ "$(proc_state "$WX")" != T ] || fail "$name: target left stopped"
	[ "$(proc_state "$WX")" != t ] || fail "$name: target left traced"
	kill "$WX"
}
exec_between "root's target runs its program again" "runs another program" "$WORKLOAD"
# The same as uid 65534, through a setuid-root copy of the program.
cp "$WORKLOAD" "$T/suid-workload"
chmod 4755 "$T/suid-workload"
"${NOBODY[@]}" "$T/suid-workload" dest --size 4096 --threads 1 >"$T/probe.out" 2>&1 &
probe=$!
for _ in $(seq 200); do
	grep -q '^ready' "$T/probe.out" 2>/dev/null && break
	kill -0 "$probe" 2>/dev/null || break
	sleep 0.05
done
p=$(pgrep -f "$T/suid-workload" | head -n1 || true)
if [ -n "$p" ] && [ "$(awk '/^Uid:/ {print $3}' "/proc/$p/status")" = 0 ]; then
	kill "$p"
	exec_between "uid 65534's target runs a setuid program" "runs another program\|permission denied" \
		"$T/suid-workload" "${NOBODY[@]}"
else
	[ -n "$p" ] && kill "$p"
	skip_part "setuid case: setuid programs do not run setuid under $T here"
fi

# The same attach, with no exec in between, completes byte for byte.
start_workload WD dest --size 16M --threads 1
src_hash H_SRC "$WS" 0x500000000000 0x500001000000
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" || fail "attach: $(cat "$T/attach.out")"
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >"$T/wait.out" ||
	fail "wait: $(cat "$T/wait.out")"
wait_verified WD
[ "$(dst_hash H_SRC "$WD" 0x500000000000 0x500001000000)" = "$H_SRC" ] ||
	fail "destination differs from the source"
info "unchanged target: migrated byte for byte"
