# shellcheck shell=bash
# The two halves of a QEMU migration between the two hosts of make_hosts
# (tests/lib.sh), for the tests that run them: sourced after qemu-lib.sh.

new_id() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
# A port for QEMU's -incoming on the destination host, none of the daemons'.
in_port() {
	local p
	new_port p
	echo "$p"
}

# receive NAME SRCDAEMON ID PORT [ARGS...]: the destination host's half,
# for QEMU NAME, in the background (RECV_PID); stdout and stderr in
# $T/recv-NAME.out.
receive() {
	local name=$1 sd=$2 id=$3 port=$4
	shift 4
	ip netns exec "$NS_DST" "$CLIENT" --control "$dst_SOCK" migrate-qemu receive \
		--qmp "$T/$name.qmp" --id "$id" \
		--from "$SRC_HOST_ADDR:$(eval echo "\$${sd}_PORT")" \
		--incoming "$DST_HOST_ADDR:$port" "$@" >"$T/recv-$name.out" 2>&1 &
	RECV_PID=$!
}

# send NAME SRCDAEMON ID PORT [ARGS...]: the source host's half, for QEMU
# NAME, in the background (SEND_PID); stdout in $T/send-NAME.out, stderr
# in $T/send-NAME.err.
send() {
	local name=$1 sd=$2 id=$3 port=$4
	shift 4
	ip netns exec "$NS_SRC" "$CLIENT" --control "$(eval echo "\$${sd}_SOCK")" \
		migrate-qemu send --qmp "$T/$name.qmp" --id "$id" \
		--to "$DST_HOST_ADDR:$port" --timeout 300 "$@" \
		>"$T/send-$name.out" 2>"$T/send-$name.err" &
	SEND_PID=$!
}

# finish_both SRCNAME DSTNAME: both halves exit 0.
finish_both() {
	local rc=0
	wait "$SEND_PID" || rc=$?
	[ "$rc" = 0 ] || fail "send ($1) exited $rc: $(cat "$T/send-$1.err")"
	wait "$RECV_PID" || rc=$?
	[ "$rc" = 0 ] || fail "receive ($2) exited $rc: $(cat "$T/recv-$2.out")"
	sed 's/^/  send: /' "$T/send-$1.err"
	sed 's/^/  receive: /' "$T/recv-$2.out"
}

# wait_line FILE PATTERN PID: until FILE shows PATTERN, while PID runs.
wait_line() {
	for _ in $(seq 1500); do
		grep -q "$2" "$1" 2>/dev/null && return
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	grep -q "$2" "$1" || fail "no '$2' in $1: $(cat "$1")"
}

# same_ram A B: B, left paused until every page was resident, holds A's
# RAM (frozen since the stop) byte for byte; then B runs.
same_ram() {
	cmp "$SHM-$1" "$SHM-$2" || fail "$2's RAM file differs from $1's"
	info "$2's RAM file equals $1's byte for byte ($(sha256sum <"$SHM-$2" | cut -c1-16))"
	qmp "$2" cont >/dev/null || fail "cont on $2"
}

