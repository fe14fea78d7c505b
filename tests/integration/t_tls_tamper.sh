#!/usr/bin/env bash
# A man in the middle changes one byte of what the source sends, well after
# the handshake. The destination opens the source's records itself
# (daemon/tls_open.c), so it is the daemon's own check that must refuse the
# record: the lane that carried it fails with "bad record mac", is opened
# again, and the migration still ends with memory identical to the source's.
. "$SRC/tests/lib.sh"
need_root
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] && skip "a TLS test (UFFDD_TEST_INSECURE=1)"
ensure_daemon src
ensure_daemon dst
# The proxy binds a port the kernel picks, and says which.
python3 "$SRC/tests/tamper-proxy.py" 0 "$src_PORT" \
	--flip-at $((24 << 20)) >"$T/proxy.log" 2>&1 &
proxy=$!
on_cleanup "kill $proxy 2>/dev/null"
for _ in $(seq 100); do
	grep -q '^listening' "$T/proxy.log" && break
	sleep 0.05
done
grep -q '^listening' "$T/proxy.log" || fail "proxy did not start: $(cat "$T/proxy.log")"
pport=$(sed -n 's/^listening //p' "$T/proxy.log")
# The destination reaches the source through the proxy only.
src_PORT=$pport
migrate 64M 2 4
grep -q '^flipped' "$T/proxy.log" || fail "the proxy changed no byte: $(cat "$T/proxy.log")"
grep -q "decryption failed or bad record mac" "$T/dst.log" ||
	fail "the destination did not refuse the changed record: $(cat "$T/dst.log")"
info "$(grep -m1 "bad record mac" "$T/dst.log")"
