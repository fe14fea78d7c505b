#!/usr/bin/env bash
# The state directory holds migration IDs (credentials) and what a restart
# hands to processes as root. The daemon refuses to start on one that
# another user owns, that others may write, or that is a symbolic link; it
# creates a missing one 0700 and takes the read bits off a listable one.
# Its files are 0600 whatever the umask; a link planted where a save puts
# its temporary is never written through (nor does it block the save); a
# state file that is a link is not read at a restart but refused, kept
# aside, and its migration reported failed.
. "$SRC/tests/lib.sh"
need_root
umask 022
: >"$T/empty.conf"

# refused DIR WANT: uffdd will not start on state directory DIR, and says
# WANT (a daemon that starts is stopped by the timeout).
refused() {
	local dir=$1 want=$2 rc=0
	SAN_WHO="refused $dir" checked "$T/r.log" timeout 10 "$UFFDD" -f --config "$T/empty.conf" \
		--insecure --control "$T/r.sock" --state-dir "$dir" || rc=$?
	[ "$rc" = 1 ] || fail "state directory $dir: uffdd exited $rc, not 1 (refused): $(cat "$T/r.log")"
	grep -q "$want" "$T/r.log" || fail "refusal of $dir does not say '$want': $(cat "$T/r.log")"
	info "refused: $(grep 'state directory' "$T/r.log")"
}

mkdir -m 0700 "$T/other"
chown 65534 "$T/other"
refused "$T/other" "owned by uid 65534, not by this daemon's uid 0"
mkdir -m 0700 "$T/gw"
chmod 0770 "$T/gw"
refused "$T/gw" "writable by group or others (mode 0770)"
mkdir "$T/ow"
chmod 1777 "$T/ow"
refused "$T/ow" "writable by group or others (mode 1777)"
mkdir -m 0700 "$T/real"
ln -s real "$T/link"
refused "$T/link" "is a symbolic link"

start_daemon fresh --state-dir "$T/new"
[ "$(stat -c %a "$T/new")" = 700 ] || fail "a missing state directory was made $(stat -c %a "$T/new"), not 0700"
mkdir -m 0755 "$T/sd"
start_daemon src --state-dir "$T/sd"
[ "$(stat -c %a "$T/sd")" = 711 ] || fail "a listable state directory stayed $(stat -c %a "$T/sd")"
grep -q "readable by group or others (mode 0755).*made 0711" "$T/src.log" ||
	fail "no word of the mode taken off: $(cat "$T/src.log")"
info "a missing directory made 0700, a listable one made 0711"

start_workload WS source --size 16M --threads 1
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000)
S=$(state_dir src)/$ID.source.state
# Saved again when a restarted daemon takes the export up: through the
# link, an old daemon overwrote what it points to.
echo precious >"$T/victim"
ln -s "$T/victim" "$S.tmp"
kill_daemon src
restart_daemon src
grep -q "restored export ${ID:0:8}" "$T/src.log" ||
	fail "the export was not taken up again: $(tail -n 5 "$T/src.log")"
[ "$(cat "$T/victim")" = precious ] || fail "a save wrote through the link in place of its temporary"
[ -f "$S" ] && [ ! -L "$S" ] || fail "$S is not a regular file: $(ls -l "$S")"
[ ! -e "$S.tmp" ] || fail "a temporary is left: $(ls -l "$(state_dir src)")"
[ "$(stat -c %a "$S")" = 600 ] || fail "state file mode $(stat -c %a "$S"), not 0600 (umask 022)"
info "saved past a planted link, file mode 0600"

# Restart with the state file a link to a copy of itself elsewhere.
kill_daemon src
mv "$S" "$T/elsewhere.state"
ln -s "$T/elsewhere.state" "$S"
restart_daemon src
grep -q "${ID:0:8}.*\.state: a symbolic link; state file refused and kept as .*\.state\.refused" "$T/src.log" ||
	fail "the linked state file was not refused: $(tail -n 5 "$T/src.log")"
[ "$(grep -c "restored export" "$T/src.log")" = 1 ] || fail "the export was restored through the link"
[ -L "$S.refused" ] && [ ! -e "$S" ] || fail "the link was not moved aside: $(ls -l "$(state_dir src)")"
"$CLIENT" --control "$src_SOCK" status "$ID" --json >"$T/status.json"
grep -q '"state":"failed"' "$T/status.json" || fail "status: $(cat "$T/status.json")"
grep -q 'state file refused at restart:.*a symbolic link' "$T/status.json" ||
	fail "status does not say why: $(cat "$T/status.json")"
info "a linked state file: refused, kept aside, reported failed"
