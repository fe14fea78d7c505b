#!/usr/bin/env bash
# Connections that have not said HELLO are limited per peer address and in
# time, and a bad frame closes its connection with a logged reason; a real
# destination is served all the same.
. "$SRC/tests/lib.sh"
need_root
# Two listening addresses (--listen takes a comma-separated list); the
# limits are checked on the first, the migration uses the second. Port 0
# each: the kernel picks two free ones, read back from ss.
start_daemon src --listen "127.0.0.1:0,127.0.0.1:0"
mapfile -t ports < <(listen_ports $(daemon_pids src))
[ ${#ports[@]} = 2 ] || fail "not two --listen ports: ${ports[*]}: $(ss -Hltnp)"
p1=${ports[0]} p2=${ports[1]}
src_PORT=$p1
[ "$(grep -c "listening for peers on 127.0.0.1:" "$T/src.log")" = 2 ] ||
	fail "second --listen address not used: $(grep listening "$T/src.log")"
start_daemon dst

# wait_log NAME PATTERN: until NAME's log matches (at most 30 s).
wait_log() {
	for _ in $(seq 600); do
		grep -q -- "$2" "$T/$1.log" && return
		sleep 0.05
	done
	fail "$1 never logged '$2': $(tail -n 5 "$T/$1.log")"
}

# Eight silent connections from 127.0.0.1 are allowed, the ninth is closed
# at once.
fds=()
for _ in $(seq 8); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$src_PORT"
	fds+=("$fd")
done
exec {extra}<>"/dev/tcp/127.0.0.1/$src_PORT"
timeout 10 cat <&"$extra" >/dev/null 2>&1 || true
wait_log src "refused: 8 connections from it and 8 in all are pending"
info "ninth connection before HELLO refused"
exec {extra}>&-
for fd in "${fds[@]}"; do
	exec {fd}>&-
done
# Until the daemon has seen all eight go, a new one would still be refused.
for _ in $(seq 600); do
	[ "$(grep -c 'refused: \(TLS\|connection closed\)' "$T/src.log")" -ge 8 ] && break
	sleep 0.05
done
[ "$(grep -c 'refused: \(TLS\|connection closed\)' "$T/src.log")" -ge 8 ] ||
	fail "the eight closed connections were not noticed: $(tail -n 5 "$T/src.log")"

# A connection that never says HELLO is dropped after its deadline.
exec {slow}<>"/dev/tcp/127.0.0.1/$src_PORT"
wait_log src "refused: no HELLO within"
exec {slow}>&-
info "silent connection dropped at its deadline"

# A bad frame header closes the connection with the reason logged.
if [ "${UFFDD_TEST_INSECURE:-0}" = 1 ]; then
	printf '\x00\x63\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"/dev/tcp/127.0.0.1/$src_PORT"
else
	printf '\x00\x63\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' |
		openssl s_client -quiet -connect "127.0.0.1:$src_PORT" -CAfile "$PKI/ca.crt" \
			-cert "$PKI/node.crt" -key "$PKI/node.key" >/dev/null 2>&1 || true
fi
wait_log src "bad frame"
info "bad frame: $(grep 'bad frame' "$T/src.log" | tail -n 1)"

# The limits left room for a real migration.
start_workload WS source --size 16M --threads 1
start_workload WD dest --size 16M --threads 1
RANGE=500000000000-500001000000
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$p2" \
	--id "$ID" --range "$RANGE" --wait >"$T/attach.out" 2>&1 ||
	fail "attach after the limits: $(cat "$T/attach.out")"
info "a real destination is still served"

# The limits are configuration (uffdd.conf(5)): lowered in a daemon's file,
# they are enforced with the limit named in the log, and a reload (SIGHUP)
# applies new ones to the running daemon.
printf 'max-regions 1\n' >"$T/lim.conf"
start_daemon lim --config "$T/lim.conf"
# Two regions (two ranges of one mapping) are one too many, on either side.
start_workload WS3 source --size 16M --threads 1
start_workload WD3 dest --size 16M --threads 1
TWO=(--range 500000000000-500000800000 --range 500000800000-500001000000)
if checked "$T/out" "$CLIENT" --control "$lim_SOCK" export "$WS3" "${TWO[@]}"; then
	fail "export of two regions with max-regions 1 succeeded: $(cat "$T/out")"
fi
grep -q "has 2 regions, more than max-regions 1" "$T/out" || fail "export over max-regions: $(cat "$T/out")"
[ "$(proc_state "$WS3")" != T ] || fail "a refused export left the source stopped"
info "export over max-regions: $(cat "$T/out")"
ID3=$("$CLIENT" --control "$src_SOCK" export "$WS3" "${TWO[@]}")
if checked "$T/out" "$CLIENT" --control "$lim_SOCK" attach "$WD3" --from "$src_ADDR:$p2" --id "$ID3" \
	"${TWO[@]}"; then
	fail "attach of two regions with max-regions 1 succeeded: $(cat "$T/out")"
fi
grep -q "2 regions, at most 1 (max-regions)" "$T/out" || fail "attach over max-regions: $(cat "$T/out")"
wait_log lim "2 regions, at most 1 (max-regions)"
ls -l "/proc/$WD3/fd" | grep -q userfaultfd && fail "refused destination got a userfaultfd"
info "attach over max-regions: $(cat "$T/out")"

# A reload lowers the connections one address may hold before HELLO, and
# the time it has to say it.
printf 'max-pending-per-address 2\nhello-timeout 2\n' >"$T/lim.conf"
kill -HUP "$lim_PID"
wait_log lim "reloaded $T/lim.conf"
exec {a}<>"/dev/tcp/127.0.0.1/$lim_PORT"
exec {b}<>"/dev/tcp/127.0.0.1/$lim_PORT"
exec {c}<>"/dev/tcp/127.0.0.1/$lim_PORT"
wait_log lim "refused: 2 connections from it and 2 in all are pending, before HELLO or closing after a refusal (max-pending-per-address 2, max-pending 64)"
info "third connection refused: $(grep 'max-pending-per-address 2' "$T/lim.log" | tail -n 1)"
t0=$SECONDS
wait_log lim "refused: no HELLO within 2 s"
[ $((SECONDS - t0)) -lt 9 ] || fail "hello-timeout 2 not applied: dropped after $((SECONDS - t0)) s"
exec {a}>&- {b}>&- {c}>&-
# A bad value on reload keeps the running limits and says where.
printf 'max-pending-per-address 0\n' >"$T/lim.conf"
kill -HUP "$lim_PID"
wait_log lim "lim.conf:1: max-pending-per-address: want a number from 1 to 4096"
