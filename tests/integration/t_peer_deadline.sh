#!/usr/bin/env bash
# A peer has hello-timeout seconds from accept for the TLS handshake and
# HELLO together, however it paces its bytes: connections that trickle a
# byte at a time, before the TLS handshake ends or after it, are closed at
# that deadline, not held while they trickle. A connection refused after
# its HELLO (an unknown migration ID) still counts against the limits
# until it closes, and closes within seconds. A real migration, longer
# than the deadline, completes byte-exact while slow peers keep coming.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the slow peers)"
HT=5
# The bulk lane at 2 MiB/s: the migration below lasts past the deadline.
start_daemon src --hello-timeout $HT --max-pending-per-address 2 --bulk-rate 2M
tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")
TRICKLE=(python3 "$SRC/tests/trickle-peer.py")

# between S LO HI: LO <= S <= HI (seconds, decimals).
between() { python3 -c 'import sys; s, lo, hi = map(float, sys.argv[1:]); sys.exit(not lo <= s <= hi)' "$@"; }

# Slow peers from 127.0.0.2 (as many as it may have pending) and refused
# ones from 127.0.0.3, at once; each trickles for 12 s unless cut.
slow=()
for mode in handshake hello; do
	"${TRICKLE[@]}" $mode 127.0.0.1 "$src_PORT" --bind 127.0.0.2 --secs 12 "${tls[@]}" \
		>"$T/$mode.out" 2>"$T/$mode.err" &
	PIDS+=($!) slow+=($!)
done
"${TRICKLE[@]}" refused 127.0.0.1 "$src_PORT" --bind 127.0.0.3 --count 2 --secs 12 "${tls[@]}" \
	>"$T/refused.out" 2>"$T/refused.err" &
PIDS+=($!) slow+=($!)
wait "${slow[@]}" || fail "a slow peer failed: $(cat "$T"/*.err)"

for mode in handshake hello; do
	line=$(cat "$T/$mode.out")
	info "$mode trickled a byte each 0.3 s: $line"
	case $line in
	closed*) between "${line#closed }" $((HT - 1)) $((HT + 3)) ||
		fail "$mode: closed after ${line#closed } s, want about $HT (hello-timeout)" ;;
	*) fail "$mode: not closed at the deadline: $line" ;;
	esac
done
[ "$(grep -c "refused: no HELLO within $HT s of connecting" "$T/src.log")" -ge 2 ] ||
	fail "no reason logged for the slow peers: $(tail -n 5 "$T/src.log")"

# Refused after HELLO: still counted (one more from that address is
# refused at once), closed within PEER_REFUSED_SECS (2) and some slack.
info "refused after HELLO: $(tr '\n' ' ' <"$T/refused.out")"
grep -qx "probe refused" "$T/refused.out" ||
	fail "connections refused after HELLO were not counted: $(cat "$T/refused.out")"
grep -q "127.0.0.3 refused: 2 connections from it and [0-9]* in all are pending" "$T/src.log" ||
	fail "no limit logged for the probe: $(tail -n 5 "$T/src.log")"
[ "$(grep -c "^error unknown migration ID" "$T/refused.out")" = 2 ] ||
	fail "refused peers did not get their ERROR: $(cat "$T/refused.out")"
[ "$(grep -c '^closed' "$T/refused.out")" = 2 ] ||
	fail "refused peers were held: $(cat "$T/refused.out")"
for s in $(sed -n 's/^closed //p' "$T/refused.out"); do
	between "$s" 0 4 || fail "a refused peer was closed after $s s, want 2 at most (and slack)"
done

# Slow peers keep coming from 127.0.0.2, filling its two slots, while a
# destination on 127.0.0.1 migrates through the same port; its lanes
# live past the deadline, which is for HELLO only.
for _ in 1 2; do
	"${TRICKLE[@]}" handshake 127.0.0.1 "$src_PORT" --bind 127.0.0.2 --secs 30 --repeat "${tls[@]}" \
		>>"$T/repeat.out" 2>&1 &
	PIDS+=($!)
done
cut0=$(grep -c "refused: no HELLO within" "$T/src.log")
start_daemon dst
# 128 MiB: the paced toucher alone (4 threads, a page each 1.5 ms) needs
# about 12 s, well past the deadline, however fast faults are answered.
paced_migration src dst 128M 0x500000000000
paced_finish dst
"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/status.json"
grep -q '"reconnects":0,' "$T/status.json" || fail "the lanes were cut: $(cat "$T/status.json")"
cut1=$(grep -c "refused: no HELLO within" "$T/src.log")
info "migrated 128M byte-exact in $(sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' "$T/status.json") s; slow peers cut meanwhile: $((cut1 - cut0))"
[ $((cut1 - cut0)) -ge 2 ] || fail "the slow peers did not keep coming: $(tail -n 5 "$T/repeat.out")"
