#!/usr/bin/env bash
# The configuration file: a strict grammar with file:line errors, `uffdd -n`
# prints the effective configuration, flags override the file, and SIGHUP
# reloads it, keeping the running configuration when the new one is bad.
. "$SRC/tests/lib.sh"
need_root

# check CONF [FLAGS...]: uffdd -n; output in $T/n.out, status returned.
check() {
	local f=$1
	shift
	SAN_WHO="uffdd -n --config $f" checked "$T/n.out" "$UFFDD" -n --config "$f" "$@"
}
# bad NAME PATTERN LINES...: a file of LINES must be refused saying PATTERN.
bad() {
	local name=$1 pat=$2
	shift 2
	printf '%s\n' "$@" >"$T/bad.conf"
	if check "$T/bad.conf" --insecure; then
		fail "$name: accepted: $(cat "$T/n.out")"
	fi
	grep -q -- "$pat" "$T/n.out" || fail "$name: error does not say '$pat': $(cat "$T/n.out")"
	info "$name: $(cat "$T/n.out")"
}

default_pki
cat >"$T/good.conf" <<EOF2
# uffdd test configuration
listen 127.0.0.1:7401        # peers
control "$T/ctl sock"
control-mode 0660
control-group 0
state-dir $T/state
ca $PKI/ca.crt
cert "$PKI/node.crt"
key $PKI/node.key
log-level debug
EOF2
check "$T/good.conf" || fail "good file refused: $(cat "$T/n.out")"
cat "$T/n.out"
grep -qx 'listen "127.0.0.1:7401"' "$T/n.out" || fail "listen not in effective config"
grep -qx "control \"$T/ctl sock\"" "$T/n.out" || fail "quoted value with a blank lost"
grep -qx 'control-mode 0660' "$T/n.out" || fail "control-mode not in effective config"
grep -qx 'log-level debug' "$T/n.out" || fail "log-level not in effective config"
# The printed configuration reads back to itself.
cp "$T/n.out" "$T/again.conf"
check "$T/again.conf" || fail "printed configuration refused: $(cat "$T/n.out")"
cmp -s "$T/n.out" "$T/again.conf" || fail "printed configuration does not read back the same"
# Flags override the file, key by key.
check "$T/good.conf" --control-mode 0600 --listen 127.0.0.1:7402 ||
	fail "flags refused: $(cat "$T/n.out")"
grep -qx 'control-mode 0600' "$T/n.out" || fail "--control-mode did not override the file"
grep -qx 'listen "127.0.0.1:7402"' "$T/n.out" || fail "--listen did not override the file"
grep -qx 'log-level debug' "$T/n.out" || fail "a key without a flag lost its file value"
# -n loads the TLS files too.
sed "s|^key .*|key $PKI/ca.key|" "$T/good.conf" >"$T/wrongkey.conf"
check "$T/wrongkey.conf" && fail "a key that does not match the certificate passed -n"
grep -q "ca.key: .*key values mismatch" "$T/n.out" || fail "wrong key: $(cat "$T/n.out")"

bad "unknown key" 'bad.conf:2: unknown key "lisen"' "# c" "lisen 1.2.3.4:5"
bad "bad mode" "bad.conf:1: control-mode: want an octal mode" "control-mode 999"
bad "bad bool" "bad.conf:1: insecure: want yes or no" "insecure maybe"
bad "bad level" "bad.conf:1: log-level: want info or debug" "log-level loud"
bad "twice" "bad.conf:2: control given twice" "control /a" "control /b"
bad "two values" "bad.conf:1: listen: one value only" "listen a b"
bad "unterminated" "bad.conf:1: unterminated quote" 'control "/a'
bad "no value" "bad.conf:1: expected \"key value\"" "control"
bad "no group" "bad.conf:1: control-group: no such group" "control-group no-such-group-here"
bad "limit too high" "bad.conf:1: max-regions: want a number from 1 to 4096" "max-regions 5000"
# A destination asks for up to 256 pages at once (written pages of private
# file mappings): a source allowing fewer would break those migrations.
bad "request limit too low" "bad.conf:1: max-request-pages: want a number from 256 to 1024" "max-request-pages 64"
bad "limit not a number" "bad.conf:2: hello-timeout: want a number from 1 to 300" "# c" "hello-timeout 5s"
bad "poll too long" "bad.conf:1: poll-us: want a number from 0 to 1000" "poll-us 5000"
bad "size too small" "bad.conf:1: max-output: want bytes (suffix K, M or G) from 8M" "max-output 1M"
# TLS and plaintext: within the file, or among the flags, they exclude
# each other; across the two the flags win, as for every key.
printf 'insecure yes\nca /x\n' >"$T/both.conf"
check "$T/both.conf" && fail "a file with insecure and ca accepted"
grep -q "exclude each other" "$T/n.out" || fail "insecure and ca in a file: $(cat "$T/n.out")"
: >"$T/none.conf"
check "$T/none.conf" --insecure --ca /x && fail "--insecure with --ca accepted"
grep -q "exclude each other" "$T/n.out" || fail "--insecure with --ca: $(cat "$T/n.out")"
check "$T/good.conf" --insecure || fail "--insecure over a file with TLS keys refused: $(cat "$T/n.out")"
grep -qx 'insecure yes' "$T/n.out" || fail "--insecure did not override the file's TLS"
grep -q '^ca \|^cert \|^key ' "$T/n.out" && fail "--insecure left the file's TLS keys: $(cat "$T/n.out")"
check "$T/both.conf" --ca "$PKI/ca.crt" --cert "$PKI/node.crt" --key "$PKI/node.key" ||
	fail "TLS flags over a file with insecure refused: $(cat "$T/n.out")"
grep -qx 'insecure no' "$T/n.out" || fail "TLS flags did not override the file's insecure: $(cat "$T/n.out")"
grep -qx "ca \"$PKI/ca.crt\"" "$T/n.out" || fail "TLS flags lost: $(cat "$T/n.out")"
# The limits print with their defaults, and a lowered one as given.
printf 'max-pending 5\nmax-output 16M\n' >"$T/lim.conf"
check "$T/lim.conf" --insecure --max-request-pages 300 || fail "limits refused: $(cat "$T/n.out")"
for want in 'max-pending 5' 'max-output 16777216' 'max-request-pages 300' \
	'max-regions 4096' 'max-pending-per-address 8' 'hello-timeout 10'; do
	grep -qx "$want" "$T/n.out" || fail "uffdd -n does not print '$want': $(cat "$T/n.out")"
done
if checked "$T/n.out" "$UFFDD" -n --config "$T/missing.conf" --insecure; then
	fail "missing --config file accepted"
fi
grep -q "missing.conf: No such file" "$T/n.out" || fail "missing file: $(cat "$T/n.out")"

# A running daemon: the file sets the socket mode, a flag would win.
cat >"$T/run.conf" <<EOF2
control-mode 0660
EOF2
start_daemon d --config "$T/run.conf"
[ "$(stat -c %a "$d_SOCK")" = 660 ] || fail "file's control-mode not applied"
start_daemon e --config "$T/run.conf" --control-mode 0640
[ "$(stat -c %a "$e_SOCK")" = 640 ] || fail "flag did not override the file"

# SIGHUP applies a good file.
echo "control-mode 0666" >"$T/run.conf"
kill -HUP "$d_PID" "$e_PID"
wait_log d "reloaded" 1
wait_log e "reloaded" 1
[ "$(stat -c %a "$d_SOCK")" = 666 ] || fail "reload did not apply control-mode"
[ "$(stat -c %a "$e_SOCK")" = 640 ] || fail "reload let the file override a flag"
# A group given, then taken out of the file: the socket is the daemon's
# own group again, not the last one it was given.
printf 'control-mode 0660\ncontrol-group 1\n' >"$T/run.conf"
kill -HUP "$d_PID"
wait_log d "reloaded" 2
[ "$(stat -c %a.%g "$d_SOCK")" = 660.1 ] || fail "reload did not apply control-group: $(stat -c %a.%g "$d_SOCK")"
echo "control-mode 0666" >"$T/run.conf"
kill -HUP "$d_PID"
wait_log d "reloaded" 3
[ "$(stat -c %a.%g "$d_SOCK")" = "666.$(id -g)" ] ||
	fail "control-group removed from the file, socket still group $(stat -c %g "$d_SOCK")"
# ... and keeps the running configuration on a bad one.
printf 'control-mode 0600\nbogus yes\n' >"$T/run.conf"
kill -HUP "$d_PID"
wait_log d "run.conf:2: unknown key \"bogus\"; keeping the running configuration" 1
[ "$(stat -c %a "$d_SOCK")" = 666 ] || fail "a bad file changed the running configuration"
# ... on TLS settings it cannot load (ca, cert and key come from flags
# here, and flags win; pin does not).
printf 'control-mode 0600\npin 00:11\n' >"$T/run.conf"
kill -HUP "$d_PID"
if [ "${UFFDD_TEST_INSECURE:-0}" = 1 ]; then
	wait_log d "exclude each other; keeping the running configuration" 1
else
	wait_log d "reload: TLS settings refused; keeping the running configuration" 1
fi
[ "$(stat -c %a "$d_SOCK")" = 666 ] || fail "bad TLS settings changed the running configuration"
# ... and on a key that only a restart can change: a daemon whose control
# socket and state directory come from its file alone.
printf 'control "%s"\nstate-dir "%s"\ncontrol-mode 0600\n' "$T/r.sock" "$T/r.state" >"$T/r.conf"
"$UFFDD" -f --insecure --config "$T/r.conf" >"$T/r.log" 2>&1 &
daemon_started r $!
r_PID=$!
wait_log r "ready: control $T/r.sock" 1
printf 'control "%s"\nstate-dir /elsewhere\ncontrol-mode 0666\n' "$T/r.sock" >"$T/r.conf"
kill -HUP "$r_PID"
wait_log r "reload: state-dir changes only at restart" 1
[ "$(stat -c %a "$T/r.sock")" = 600 ] || fail "a restart-only change was half applied"
kill -0 "$r_PID" || fail "daemon died on reload"
kill -0 "$d_PID" || fail "daemon died on reload"
"$CLIENT" --control "$d_SOCK" status >/dev/null || fail "daemon does not answer after reloads"
