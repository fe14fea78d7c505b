#!/usr/bin/env bash
# A peer asks the source for a TLS 1.3 key update. The source's records are
# sealed by the daemon (daemon/tls_seal.c) with the keys OpenSSL hands it,
# so OpenSSL's answer (its own KeyUpdate, under the old key) and every
# record after it (under the new key) go through that code. The peer here
# is the openssl CLI, which asks with its "K" command and then says HELLO
# for an unknown migration: the source's error frame and close_notify
# must reach it readable, and nothing may fail to decrypt.
. "$SRC/tests/lib.sh"
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] && skip "a TLS test (UFFDD_TEST_INSECURE=1)"
command -v openssl >/dev/null || skip "openssl CLI missing (Debian package openssl)"
ensure_daemon src
python3 -c '
import struct, sys
ident = b"0123456789abcdef0123456789abcdef"
msg = b"\x08\x02\x18\x01\x22" + bytes([len(ident)]) + ident  # version 2
sys.stdout.buffer.write(struct.pack(">HHII", 1, 0, len(msg), 0) + msg)
' >"$T/hello.bin"
# -msg shows each record's content type and each handshake message. Each
# step waits for the one before to be done: the handshake, "K" (our
# KeyUpdate sent; the source answers with its own before what it writes
# next), the HELLO, the source's close_notify.
mkfifo "$T/sc.in"
timeout 20 openssl s_client -connect "127.0.0.1:$src_PORT" \
	-CAfile "$PKI/ca.crt" -cert "$PKI/node.crt" -key "$PKI/node.key" \
	-tls1_3 -msg <"$T/sc.in" >"$T/sc.out" 2>&1 &
SC=$!
exec {to_sc}>"$T/sc.in"
# sc_says PATTERN: until s_client's output has a line matching PATTERN.
sc_says() {
	for _ in $(seq 300); do
		grep -q -- "$1" "$T/sc.out" && return
		kill -0 "$SC" 2>/dev/null || break
		sleep 0.05
	done
	grep -q -- "$1" "$T/sc.out"
}
sc_says '^SSL handshake has read' || fail "no TLS session with the source: $(tail -20 "$T/sc.out")"
echo K >&"$to_sc"
sc_says '^>>> TLS 1.3, Handshake \[length 0005\], KeyUpdate' ||
	fail "s_client sent no key update: $(tail -20 "$T/sc.out")"
cat "$T/hello.bin" >&"$to_sc"
sc_says '^<<< TLS 1.3, Alert \[length 0002\], warning close_notify' || fail "no close_notify from the source: $(tail -30 "$T/sc.out")"
exec {to_sc}>&-
wait "$SC" || true
grep -q '^KEYUPDATE' "$T/sc.out" || fail "s_client sent no key update: $(tail -20 "$T/sc.out")"
grep -q '^<<< TLS 1.3, Handshake \[length 0005\], KeyUpdate' "$T/sc.out" ||
	fail "the source sent no KeyUpdate back: $(tail -30 "$T/sc.out")"
grep -q 'unknown migration ID' "$T/sc.out" ||
	fail "the source's error frame did not arrive readable: $(tail -30 "$T/sc.out")"
grep -q '^<<< TLS 1.3, Alert \[length 0002\], warning close_notify' "$T/sc.out" ||
	fail "no close_notify from the source: $(tail -30 "$T/sc.out")"
if grep -qi 'bad record mac\|decryption failed' "$T/sc.out"; then
	fail "a record of the source's did not decrypt: $(tail -30 "$T/sc.out")"
fi
info "key update answered; error frame and close_notify read under the new key"
