#!/usr/bin/env bash
# A destination's state file changed while its daemon was down: one byte
# changed, a record appended after the checksum, a key repeated, a value
# with a newline in it (what a region name from a hostile source did to the
# old key=value files), a format version this uffdd does not read, a bad
# number. The last four come with the checksum made right again (as root
# could), so that each check is seen on its own. The restarted daemon
# refuses each with FILE:LINE and what is wrong, takes no userfaultfd from
# any process, keeps the file aside and reports the migration failed. The
# untouched file then restores, and the migration completes byte-exact.
. "$SRC/tests/lib.sh"
need_root

start_daemon src --bulk-rate 4M
start_daemon dst
paced_migration src dst 128M 0x500000000000
sleep 1.5
"$CLIENT" --control "$dst_SOCK" status "$ID" --json | grep -q '"state":"running"' ||
	fail "migration not running when the destination daemon is killed"
kill_daemon dst
F=$(state_dir dst)/$ID.destination.state
cp -p "$F" "$T/pristine"
# The privileged part's record of the attach's grant: a refused file's
# grant is dropped with it, so the untouched file comes back with it.
G=$T/dst.state/grants/$ID.destination.grant
cp -p "$G" "$T/pristine.grant" || fail "no record of the attach's grant"
head -n 1 "$F" | grep -q '^uffdd-state 1$' || fail "no version line first: $(head -n 3 "$F")"
tail -n 1 "$F" | grep -qE '^sha256 [0-9a-f]{64}$' || fail "no checksum line last: $(tail -n 1 "$F")"

# tampered NAME WANT SED [resum]: the pristine file edited by SED (and its
# checksum made right again) is refused at a restart with WANT.
tampered() {
	local name=$1 want=$2 edit=$3 n p
	cp -p "$T/pristine" "$F"
	sed -i -e "$edit" "$F"
	[ "${4:-}" = resum ] && state_resum "$F"
	cmp -s "$F" "$T/pristine" && fail "$name: the edit changed nothing"
	n=$(wc -l <"$T/dst.log")
	restart_daemon dst
	tail -n +$((n + 1)) "$T/dst.log" >"$T/since"
	grep -qE "${ID:0:8}.*\.state:[0-9]+: $want" "$T/since" ||
		fail "$name: not refused with FILE:LINE: $want: $(cat "$T/since")"
	grep -q "restored migration" "$T/since" && fail "$name: the migration was restored"
	for p in $(daemon_pids dst); do
		ls -l "/proc/$p/fd" | grep -q userfaultfd && fail "$name: the daemon (pid $p) took a userfaultfd"
	done
	[ -f "$F.refused" ] && [ ! -e "$F" ] || fail "$name: the file was not kept aside: $(ls -l "$(state_dir dst)")"
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/status.json"
	grep -q '"state":"failed"' "$T/status.json" || fail "$name: status: $(cat "$T/status.json")"
	grep -qE "state file refused at restart: .*\.state:[0-9]+: $want" "$T/status.json" ||
		fail "$name: status does not say why: $(cat "$T/status.json")"
	info "$name: $(grep -oE '[^/]*\.state:[0-9]+: .*; state file refused' "$T/since")"
	kill_daemon dst
	rm -f "$F.refused"
}

tampered "one byte changed" "checksum mismatch" 's/^from=127\./from=128./'
tampered "a record appended" "the last line is not the checksum" '$ a pid=1'
tampered "a key repeated" "key target_fd repeated \(first at line [0-9]+\)" \
	'/^target_fd=/ p' resum
tampered "a newline in a value" "key pid repeated \(first at line [0-9]+\)" \
	's/^region_name\.0=.*/&x\npid=1\ntarget_fd=3/' resum
tampered "another version" "format version 2; this uffdd reads version 1 only" \
	'1 s/ 1$/ 2/' resum
tampered "a bad number" "target_fd: want 1 decimal number" \
	's/^target_fd=/target_fd=+/' resum
tampered "an unknown key" "unknown record target_pid" \
	'/^target_fd=/ s/^target_fd=/target_pid=/' resum

cp -p "$T/pristine" "$F"
cp -p "$T/pristine.grant" "$G"
restart_daemon dst
grep -q "restored migration ${ID:0:8}.* into process $WD" "$T/dst.log" ||
	fail "the untouched file was not restored: $(tail -n 5 "$T/dst.log")"
paced_finish dst
info "the untouched file restored; complete, byte-exact"
