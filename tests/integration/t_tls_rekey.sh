#!/usr/bin/env bash
# A source moves its lanes to new TLS keys on its own (a KeyUpdate every
# TLS_REKEY_RECORDS records, daemon/tls_batch.c), and the destination,
# which opens the source's records itself (daemon/tls_open.c), follows.
# UFFDD_TEST_REKEY_RECORDS makes the count small: 64 MiB is about 4100
# full records, so the bulk lane changes keys several times in one
# migration. No lane may be lost to it, and memory must match the
# source's byte for byte. Then a count of 2: keys change from a lane's
# first records on, the demand lane's too. (The destination takes a
# lane's reading over from OpenSSL before the source has sent two
# records on it, so OpenSSL itself opens none of these key updates here.)
# The source looks at its count between writes, so it changes keys at the
# first look past the count, not at that record.
. "$SRC/tests/lib.sh"
need_root
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] && skip "a TLS test (UFFDD_TEST_INSECURE=1)"

# rekeyed COUNT SIZE: one migration of SIZE with keys changed every COUNT
# records, and what both daemons logged of it.
rekeyed() {
	local name
	export UFFDD_TEST_REKEY_RECORDS=$1
	for name in src dst; do # fresh daemons that read the count, fresh logs
		[ -z "$(eval echo "\${${name}_PID:-}")" ] || stop_daemon "$name"
		rm -f "$T/$name.sock"
		: >"$T/$name.log"
		start_daemon "$name"
	done
	migrate "$2" 2 4 >/dev/null
	unset UFFDD_TEST_REKEY_RECORDS
	ASKED=$(grep -c 'TLS: new sending key asked for' "$T/src.log" || true)
	TAKEN=$(grep -c "TLS: the peer's new key taken" "$T/dst.log" || true)
	if grep -q 'lane lost\|bad record mac\|decryption failed' "$T/dst.log"; then
		fail "count $1: a lane failed: $(grep -m3 'lane lost\|bad record mac\|decryption failed' "$T/dst.log")"
	fi
	grep -q "bulk lane's TLS records opened by uffdd" "$T/dst.log" ||
		fail "count $1: the destination did not open the bulk lane's records: $(cat "$T/dst.log")"
}

rekeyed 1000 64M
[ "$ASKED" -ge 3 ] || fail "the source changed keys $ASKED times in 64 MiB (want 3 or more): $(cat "$T/src.log")"
[ "$TAKEN" -ge 3 ] || fail "the destination took $TAKEN key updates (want 3 or more): $(cat "$T/dst.log")"
info "every 1000 records: $ASKED key updates sent, $TAKEN taken by the daemon's opener; byte for byte"
info "$(grep -m1 'TLS: new sending key asked for' "$T/src.log")"
info "$(grep -m1 "TLS: the peer's new key taken" "$T/dst.log")"

rekeyed 2 4M
[ "$ASKED" -ge 3 ] || fail "count 2: the source changed keys $ASKED times: $(cat "$T/src.log")"
info "every 2 records: $ASKED key updates sent, $TAKEN of them taken by the daemon's opener; byte for byte"
