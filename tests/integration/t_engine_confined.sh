#!/usr/bin/env bash
# The engine confined (--engine-user, docs/privsep.md), seen from outside.
# During a TLS migration whose target forks, the engine of each daemon
# runs as the user uffdd (made by the project's sysusers.d file), with
# no effective capability, NoNewPrivs and a seccomp filter
# (/proc/PID/status), holds the peer connections, and the migration
# completes byte-exact, the child's too. Its state files are in the state
# directory's engine/, of that user. A reload reads a key only root may
# read (the privileged part hands the files over), and a second migration
# with the same engines completes byte-exact too.
. "$SRC/tests/lib.sh"
need_root
need_engine_user
command -v ss >/dev/null || skip "ss missing (Debian package iproute2)"
SRC_DAEMON_ARGS="--bulk-rate 8M --engine-user uffdd"
DST_DAEMON_ARGS="--engine-user uffdd"
start_daemon src $SRC_DAEMON_ARGS
start_daemon dst $DST_DAEMON_ARGS
BASE=0x500000000000
END=$(printf '0x%x' $((BASE + (64 << 20))))
RANGE=${BASE#0x}-${END#0x}
UID_ENGINE=$(id -u uffdd)

# confined NAME: daemon NAME's engine runs as uffdd, confined.
confined() {
	local eng st
	eng=$(engine_pid "$1")
	[ -n "$eng" ] || fail "daemon $1 has no engine"
	st=/proc/$eng/status
	awk '/^Uid:/ {print $2, $3, $4, $5}' "$st" | grep -qx "$UID_ENGINE $UID_ENGINE $UID_ENGINE $UID_ENGINE" ||
		fail "$1: engine $eng runs as $(grep ^Uid: "$st")"
	grep -qx 'CapEff:[[:space:]]*0000000000000000' "$st" || fail "$1: engine $eng: $(grep ^CapEff: "$st")"
	grep -qx 'CapPrm:[[:space:]]*0000000000000000' "$st" || fail "$1: engine $eng: $(grep ^CapPrm: "$st")"
	grep -qx 'NoNewPrivs:[[:space:]]*1' "$st" || fail "$1: engine $eng: $(grep ^NoNewPrivs: "$st")"
	grep -qx 'Seccomp:[[:space:]]*2' "$st" || fail "$1: engine $eng: $(grep ^Seccomp: "$st")"
	# The privileged part stays root.
	grep -qE '^Uid:[[:space:]]+0[[:space:]]' "/proc/$(eval echo "\$${1}_PID")/status" ||
		fail "$1: the privileged part is not root"
	info "$1: engine $eng: uid $UID_ENGINE, CapEff 0, NoNewPrivs 1, Seccomp 2"
}

info "a TLS migration with confined engines, the target forking"
start_workload WS source --size 64M --threads 2 --kind memfd
start_workload WD dest --size 64M --threads 4 --prefault --pace-us 200 --kind memfd \
	--event fork
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
H_SRC=$("$MEMHASH" "$WS" $BASE "$END")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range "$RANGE" >"$T/attach.out" || fail "attach: $(cat "$T/attach.out")"
kill -USR1 "$WD"
sleep 0.5
"$CLIENT" --control "$dst_SOCK" status "$ID" --json | grep -q '"state":"running"' ||
	fail "the migration is not running: $("$CLIENT" --control "$dst_SOCK" status "$ID")"
for n in src dst; do
	confined $n
	engine_holds_peers $n "$src_PORT"
	# Its state files: in engine/, the engine's.
	[ "$(stat -c %U "$T/$n.state/engine")" = uffdd ] ||
		fail "$n: $T/$n.state/engine is not the engine user's: $(stat -c '%U %a' "$T/$n.state/engine")"
	ls "$T/$n.state/engine" | grep -q "\.state$" ||
		fail "$n: no state file in $T/$n.state/engine: $(ls -la "$T/$n.state" "$T/$n.state/engine")"
done
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" || fail "wait: $(cat "$T/wait.out")"
wait_verified WD
wait_child_verified WD "the target's forked child"
[ "$("$MEMHASH" "$WD" $BASE "$END")" = "$H_SRC" ] || fail "the destination differs from the source"
"$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 >/dev/null || fail "the source did not complete"
kill -9 "$WD"
info "complete, byte-exact, the child's memory too"

# A reload reads files the engine may not: the key root's alone, in a
# directory only root may enter. The privileged part opens them for it.
chmod 0600 "$PKI/node.key" "$T/empty.conf"
chmod 0700 "$PKI"
kill -HUP "$dst_PID"
wait_log dst "reloaded" 1
! grep -q "TLS settings refused\|keeping the running" "$T/dst.log" ||
	fail "the confined engine's reload was refused: $(grep -m1 "refused\|keeping" "$T/dst.log")"
info "reload with a key only root may read: reloaded"

migrate 32M 2 2 >/dev/null
info "a second migration with the same engines, TLS as reloaded: byte-exact"
