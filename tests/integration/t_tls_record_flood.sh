#!/usr/bin/env bash
# A source that went bad floods the destination's bulk lane with records
# that bring nothing: empty ones, or KeyUpdates. The destination opens the
# source's records itself (daemon/tls_open.c), so it is the daemon's own
# limits that must stop it: 32 of either in a row pass, as OpenSSL lets
# empty records and BoringSSL KeyUpdates pass; past that the lane fails
# with the reason in the log, is opened again, and the migration still
# ends with memory identical to the source's (so the daemon lived). The
# hostile source is tests/record-flood-proxy.py: it holds a certificate
# the destination trusts and keys of its own, relays the real source's
# data in records it seals itself, and floods the first lane that passes
# 24 MiB (the bulk lane) with its records.
. "$SRC/tests/lib.sh"
need_root
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] && skip "a TLS test (UFFDD_TEST_INSECURE=1)"
python3 -c 'import cryptography' 2>/dev/null ||
	skip "python3 module cryptography missing (Debian package python3-cryptography)"
ensure_daemon src
ensure_daemon dst
real_port=$src_PORT

# flooded KIND COUNT: one migration through the proxy, which sends COUNT
# records of KIND into the bulk lane; NEW holds what dst logged meanwhile.
flooded() {
	local pport proxy from
	pport=$(free_port)
	python3 "$SRC/tests/record-flood-proxy.py" "$pport" "$real_port" \
		"$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key" --kind "$1" \
		--count "$2" --at $((24 << 20)) >"$T/proxy.log" 2>&1 &
	proxy=$!
	on_cleanup "kill $proxy 2>/dev/null"
	for _ in $(seq 100); do
		grep -q '^listening' "$T/proxy.log" && break
		sleep 0.05
	done
	grep -q '^listening' "$T/proxy.log" || fail "proxy did not start: $(cat "$T/proxy.log")"
	from=$(($(wc -l <"$T/dst.log") + 1))
	src_PORT=$pport
	migrate 64M 2 4 >/dev/null
	src_PORT=$real_port
	kill "$proxy" 2>/dev/null || true
	wait "$proxy" 2>/dev/null || true
	NEW=$(tail -n +"$from" "$T/dst.log")
	grep -q "^flooded .* $1 $2" "$T/proxy.log" ||
		fail "$1 $2: the proxy sent no flood: $(cat "$T/proxy.log")"
	grep -q "bulk lane's TLS records opened by uffdd" <<<"$NEW" ||
		fail "$1 $2: the destination did not open the bulk lane's records: $NEW"
}

# At the limit: taken, and no lane lost.
passes() {
	flooded "$1" "$2"
	if grep -q 'lane lost\|more than 32\|bad record mac' <<<"$NEW"; then
		fail "$1 $2: a lane failed: $(grep -m3 'lane lost\|more than 32\|bad record mac' <<<"$NEW")"
	fi
	info "$1 $2: taken, no lane lost; byte for byte"
}

# Past it: the bulk lane fails with the reason, then the migration ends.
fails() {
	flooded "$1" "$2"
	grep -q "bulk lane lost (TLS: $3)" <<<"$NEW" ||
		fail "$1 $2: the bulk lane was not failed with \"$3\": $NEW"
	info "$1 $2: $(grep -m1 "bulk lane lost" <<<"$NEW")"
}

passes empty 32
fails empty 100000 "more than 32 empty records in a row"
passes keyupdate 32
grep -q "TLS: the peer's new key taken (key update 32)" <<<"$NEW" ||
	fail "keyupdate 32: the destination did not take 32 key updates: $NEW"
fails keyupdate 1000 "more than 32 key updates with no data between"
