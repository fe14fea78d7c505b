#!/usr/bin/env bash
# Every peer connection is TLS 1.3 with mutual authentication: a peer with a
# certificate from another CA, an expired certificate or a certificate for
# another name is refused, both as source and as destination; TLS 1.2 is
# refused; plaintext is refused off loopback; a wrong migration ID gets
# nothing. Each refusal is checked against a real pair of daemons, and the
# destination process must come out of it untouched.
. "$SRC/tests/lib.sh"
need_root
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] && skip "UFFDD_TEST_INSECURE=1: this test is about TLS"
default_pki
make_ca other
issue other stranger "IP:127.0.0.1"
issue ca expired "IP:127.0.0.1" -startdate 20200101000000Z -enddate 20200102000000Z
issue ca wrongname "DNS:elsewhere.example"
cert_args() { echo --cert "$PKI/$1.crt" --key "$PKI/$1.key"; }

start_daemon src
start_daemon dst
start_workload WS source --size 16M --threads 1
start_workload WD dest --size 16M --threads 1
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000)
# A well-formed ID that no source knows: a source that accepts the TLS
# connection answers "unknown migration ID", one that refuses never sees it.
NOID=0123456789abcdef0123456789abcdef

# attach_fails NAME PATTERN DSTSOCK PORT ID: attach must fail saying PATTERN
# and leave the destination process as it was.
attach_fails() {
	local name=$1 pat=$2 sock=$3 port=$4 id=$5
	if SAN_WHO="attach_fails $name" checked "$T/out" \
		"$CLIENT" --control "$sock" attach "$WD" --from "127.0.0.1:$port" --id "$id"; then
		fail "$name: attach succeeded: $(cat "$T/out")"
	fi
	grep -qi -- "$pat" "$T/out" || fail "$name: error does not say '$pat': $(cat "$T/out")"
	ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "$name: destination got a userfaultfd"
	[ "$(proc_state "$WD")" != T ] || fail "$name: destination left stopped"
	info "$name: $(cat "$T/out")"
}
# log_says NAME LOG PATTERN: the refusing daemon logged why.
log_says() {
	grep -qi -- "$3" "$T/$2.log" || fail "$1: $2 did not log '$3': $(tail -n 5 "$T/$2.log")"
	info "$1: $2 logged: $(grep -i -- "$3" "$T/$2.log" | tail -n 1)"
}

# Positive control: the pair with certificates from the same CA gets past
# TLS and is told the ID is unknown.
attach_fails "control" "unknown migration ID" "$dst_SOCK" "$src_PORT" "$NOID"

# A destination with a certificate from another CA: the source refuses it.
# In TLS 1.3 the client's certificate is checked after the client finished
# its side of the handshake and sent its Hello frame, so the source's alert
# may be lost in the reset; the source's log is what says why.
# shellcheck disable=SC2046
start_daemon dother $(cert_args stranger)
attach_fails "client from other CA" "unreachable" "$dother_SOCK" "$src_PORT" "$ID"
log_says "client from other CA" src "refused: TLS: peer certificate refused"

# A source with a certificate from another CA: the destination refuses it.
# shellcheck disable=SC2046
start_daemon sother $(cert_args stranger)
attach_fails "server from other CA" "certificate refused: unable to get local issuer" \
	"$dst_SOCK" "$sother_PORT" "$NOID"

# A refused attach leaves no connection behind (it used to wait forever to
# send its HELLO on the broken connection).
# Both parts of the daemon: the engine holds the peer connections.
nfd() { local p; for p in $(daemon_pids dst); do ls "/proc/$p/fd"; done | wc -l; }
fds_before=$(nfd)
for _ in 1 2 3 4 5; do
	SAN_WHO="attach to a source from another CA" checked "$T/out" "$CLIENT" --control "$dst_SOCK" \
		attach "$WD" --from "127.0.0.1:$sother_PORT" --id "$NOID" &&
		fail "attach to a source from another CA succeeded"
done
"$CLIENT" --control "$dst_SOCK" status >/dev/null
[ "$(nfd)" -le "$fds_before" ] || fail "refused attaches left $(($(nfd) - fds_before)) descriptors open"

# Expired certificates, on either side.
# shellcheck disable=SC2046
start_daemon sexp $(cert_args expired)
attach_fails "expired server" "certificate refused: certificate has expired" \
	"$dst_SOCK" "$sexp_PORT" "$NOID"
# shellcheck disable=SC2046
start_daemon dexp $(cert_args expired)
attach_fails "expired client" "unreachable" "$dexp_SOCK" "$src_PORT" "$ID"
log_says "expired client" src "certificate has expired"

# A source whose certificate does not name the address in --from.
# shellcheck disable=SC2046
start_daemon sname $(cert_args wrongname)
attach_fails "name mismatch" "certificate refused: IP address mismatch" \
	"$dst_SOCK" "$sname_PORT" "$NOID"
# ... unless the destination pins that certificate's SHA-256 fingerprint.
pin=$(openssl x509 -in "$PKI/wrongname.crt" -noout -fingerprint -sha256 | sed 's/.*=//')
start_daemon dpin --pin "$pin"
attach_fails "pinned fingerprint" "unknown migration ID" "$dpin_SOCK" "$sname_PORT" "$NOID"
# A pin that does not match is refused even though the name would match.
start_daemon dbadpin --pin "$(printf '%064d' 0)"
attach_fails "wrong pin" "certificate refused: certificate rejected" \
	"$dbadpin_SOCK" "$src_PORT" "$NOID"

# The same, pinned for one attach only (attach --pin): the daemons above
# have no pin of their own, or the wrong one, and the attach's pin decides.
# pin_fails NAME PATTERN DSTSOCK PORT PIN: like attach_fails, with --pin.
pin_fails() {
	if SAN_WHO="pin_fails $1" checked "$T/out" \
		"$CLIENT" --control "$3" attach "$WD" --from "127.0.0.1:$4" --id "$NOID" --pin "$5"; then
		fail "$1: attach succeeded: $(cat "$T/out")"
	fi
	grep -qi -- "$2" "$T/out" || fail "$1: error does not say '$2': $(cat "$T/out")"
	ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "$1: destination got a userfaultfd"
	info "$1: $(cat "$T/out")"
}
nodepin=$(openssl x509 -in "$PKI/node.crt" -noout -fingerprint -sha256 | sed 's/.*=//')
pin_fails "attach pin accepted" "unknown migration ID" "$dst_SOCK" "$sname_PORT" "$pin"
pin_fails "attach pin over the daemon's wrong pin" "unknown migration ID" \
	"$dbadpin_SOCK" "$src_PORT" "$nodepin"
pin_fails "attach pin wrong" "certificate refused: certificate rejected" \
	"$dst_SOCK" "$src_PORT" "$(printf '%064d' 0)"
pin_fails "attach pin over the daemon's right pin" "certificate refused: certificate rejected" \
	"$dpin_SOCK" "$sname_PORT" "$nodepin"
pin_fails "attach pin malformed" "64 hex digits" "$dst_SOCK" "$src_PORT" "12:34"
# The pin stays with that attach: the next one without it is held to the
# name again.
attach_fails "no pin after a pinned attach" "certificate refused: IP address mismatch" \
	"$dst_SOCK" "$sname_PORT" "$NOID"
# A whole migration from the wrongly named source, accepted by its pin
# alone, arrives byte for byte.
start_workload WS2 source --size 16M --threads 1
start_workload WD2 dest --size 16M --threads 1 --prefault
R=500000000000-500001000000
ID2=$("$CLIENT" --control "$sname_SOCK" export "$WS2" --range "$R")
src_hash h_src "$WS2" 0x500000000000 0x500001000000
"$CLIENT" --control "$dst_SOCK" attach "$WD2" --from "127.0.0.1:$sname_PORT" \
	--id "$ID2" --range "$R" --pin "$pin" >"$T/pinned.out" 2>&1 ||
	fail "pinned attach: $(cat "$T/pinned.out")"
kill -USR1 "$WD2"
"$CLIENT" --control "$dst_SOCK" wait "$ID2" --timeout 120 >"$T/pinned.wait" ||
	fail "pinned migration: $(cat "$T/pinned.wait")"
wait_verified WD2
h_dst=$(dst_hash h_src "$WD2" 0x500000000000 0x500001000000)
[ "$h_src" = "$h_dst" ] || fail "pinned migration: destination memory differs ($h_src vs $h_dst)"
info "pinned migration from a source named otherwise: $h_dst"

# TLS 1.2 and below are refused by the listener, with a valid client
# certificate; the same client with TLS 1.3 gets through.
s_client() {
	openssl s_client -connect "127.0.0.1:$src_PORT" -CAfile "$PKI/ca.crt" \
		-cert "$PKI/node.crt" -key "$PKI/node.key" "$@" </dev/null >"$T/s_client.out" 2>&1
}
if s_client -tls1_2; then
	fail "TLS 1.2 handshake succeeded: $(cat "$T/s_client.out")"
fi
grep -qi "protocol version\|no protocols available\|unsupported protocol" "$T/s_client.out" ||
	fail "TLS 1.2 refused for another reason: $(cat "$T/s_client.out")"
info "TLS 1.2 refused: $(grep -i -m1 'protocol' "$T/s_client.out")"
s_client -tls1_3 || fail "TLS 1.3 with s_client failed: $(cat "$T/s_client.out")"
grep -q "TLSv1.3" "$T/s_client.out" || fail "s_client did not negotiate TLS 1.3"

# A plaintext destination is refused by a TLS source.
start_daemon dplain --insecure
attach_fails "plaintext client" "unreachable" "$dplain_SOCK" "$src_PORT" "$ID"
# Plaintext off loopback is refused before any packet leaves: for peers to
# connect to, and for the listener.
if SAN_WHO="plaintext to 192.0.2.1" checked "$T/out" \
	"$CLIENT" --control "$dplain_SOCK" attach "$WD" --from "192.0.2.1:7401" --id "$ID"; then
	fail "plaintext to 192.0.2.1 accepted"
fi
grep -q "non-loopback" "$T/out" || fail "plaintext to 192.0.2.1: $(cat "$T/out")"
info "plaintext non-loopback: $(cat "$T/out")"
if SAN_WHO="plaintext listener" checked "$T/x.log" "$UFFDD" -f --insecure \
	--listen "0.0.0.0:$(free_port)" --control "$T/x.sock" --state-dir "$T/x.state"; then
	fail "plaintext listener on 0.0.0.0 started"
fi
grep -q "non-loopback" "$T/x.log" || fail "plaintext listener: $(cat "$T/x.log")"
# Without --insecure the daemon wants its TLS files.
if SAN_WHO="daemon without TLS files" checked "$T/y.log" "$UFFDD" -f \
	--listen "127.0.0.1:$(free_port)" --control "$T/y.sock" --state-dir "$T/y.state"; then
	fail "daemon without TLS files started"
fi
grep -q "TLS needs --ca, --cert and --key" "$T/y.log" || fail "no TLS files: $(cat "$T/y.log")"

# A wrong ID over an authenticated connection gets nothing (the real one
# with its last digit changed), and the full IDs never reach the logs.
case $ID in *0) WRONG=${ID%?}1 ;; *) WRONG=${ID%?}0 ;; esac
attach_fails "wrong id" "unknown migration ID" "$dst_SOCK" "$src_PORT" "$WRONG"
[ "$(proc_state "$WS")" = T ] || fail "source left its frozen state"
for l in "$T"/*.log; do
	grep -q "$ID\|$WRONG\|$NOID" "$l" && fail "a full migration ID is in $l"
done

# The refusals changed nothing: the real pair still migrates.
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
	--id "$ID" --range 500000000000-500001000000 --wait >"$T/attach.out" 2>&1 ||
	fail "attach after the refusals: $(cat "$T/attach.out")"
info "attach over TLS after the refusals completed"
