#!/usr/bin/env bash
# --version says what was built: configure's version and, from a git
# checkout, the commit; `uffd-client COMMAND --help` prints that command's
# usage and exits 0 without asking a daemon anything.
. "$SRC/tests/lib.sh"
want=$(sed -n 's/^AC_INIT(\[uffdd\], \[\([^]]*\)\].*/\1/p' "$SRC/configure.ac")
[ -n "$want" ] || fail "no version in configure.ac"
for prog in "$UFFDD" "$CLIENT"; do
	name=$(basename "$prog")
	out=$("$prog" --version) || fail "$name --version: exit $?"
	[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$name --version: not one line: $out"
	case $out in
	"$name $want"*) ;;
	*) fail "$name --version: '$out' is not '$name $want...'" ;;
	esac
	# Built from a git checkout: the commit is named, dirty or not.
	if [ -e "$SRC/.git" ] && command -v git >/dev/null; then
		printf '%s\n' "$out" | grep -Eq "\(git ([^ ]*-g)?[0-9a-f]{7,}(-dirty)?\)$" ||
			fail "$name --version: no git description: $out"
	fi
	info "$out"
done

# Every command's --help (and -h): its usage line, on stdout, exit 0, and
# no daemon needed: the control socket named does not exist.
cmds=$("$CLIENT" --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\)\( .*\)\{0,1\}$/\1/p' | sort -u)
[ "$(echo "$cmds" | wc -w)" -ge 10 ] || fail "too few commands in --help: $cmds"
for c in $cmds; do
	for h in --help -h; do
		out=$("$CLIENT" --control "$T/none.sock" "$c" "$h" 2>"$T/err") ||
			fail "$c $h: exit $?: $(cat "$T/err")"
		[ -s "$T/err" ] && fail "$c $h: said on stderr: $(cat "$T/err")"
		printf '%s\n' "$out" | grep -q "^usage: uffd-client $c" ||
			fail "$c $h: not its usage: $out"
	done
done
info "commands with --help: $(echo $cmds)"
# After other arguments too, and --version among the global options.
"$CLIENT" attach 1 --from 127.0.0.1:1 --help | grep -q "^usage: uffd-client attach" ||
	fail "attach ... --help: not attach's usage"
# After "--" it is an argument, not a request for help: the usual error.
"$CLIENT" --control "$T/none.sock" wait -- --help >/dev/null 2>&1 &&
	fail "wait -- --help: taken as a request for help"
# An unknown option is still bad usage (2), on stderr.
rc=0
"$CLIENT" status --bogus >/dev/null 2>"$T/err" || rc=$?
[ "$rc" = 2 ] || fail "status --bogus: exit $rc, want 2"
grep -q "usage:" "$T/err" || fail "status --bogus: no usage on stderr"
info "COMMAND --help prints the usage; -- and unknown options as before"
