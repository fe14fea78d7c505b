#!/usr/bin/env bash
# 64 MiB private anonymous memory, resident garbage on the destination that
# attach must discard, 4 faulting threads: the smallest whole migration.
. "$SRC/tests/lib.sh"
need_root
migrate 64M 2 4
# With TLS, the source seals its bulk lane's records itself, with the keys
# OpenSSL hands over; the destination's OpenSSL reading them unchanged is
# what shows they are TLS records.
if [ "${UFFDD_TEST_INSECURE:-0}" != 1 ]; then
	grep -q "bulk lane's TLS records sealed by uffdd" "$T/src.log" ||
		fail "the source did not seal its bulk lane's records: $(cat "$T/src.log")"
fi
# And the destination opens them itself, straight into the pages' buffer.
if [ "${UFFDD_TEST_INSECURE:-0}" != 1 ]; then
	grep -q "bulk lane's TLS records opened by uffdd" "$T/dst.log" ||
		fail "the destination did not open its bulk lane's records: $(cat "$T/dst.log")"
fi
