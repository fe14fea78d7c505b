#!/usr/bin/env bash
# The man pages match --help: every option of uffdd, every command and
# option of uffd-client, every key of the configuration is documented, and
# the pages render without warnings; the docs name no path that is not
# there.
. "$SRC/tests/lib.sh"
M=$SRC/man
# In roff, "-" is written "\-".
in_page() { grep -q -- "$2" <(sed 's/\\-/-/g' "$1"); }

# The help in a file: grep -q on a pipe would end uffdd by SIGPIPE, as the
# help is more than one write.
"$UFFDD" --help >"$T/uhelp"
for opt in $(grep -o -- '--[a-z][a-z-]*' "$T/uhelp" | sort -u); do
	in_page "$M/uffdd.8" "$opt" || fail "uffdd.8 does not document $opt"
done
for key in $("$UFFDD" -n --insecure --config /dev/null | sed 's/^# //' | awk '{print $1}'); do
	in_page "$M/uffdd.conf.5" "^\.B[IR]* $key" || fail "uffdd.conf.5 does not document key $key"
	grep -q -- "--$key" "$T/uhelp" || fail "key $key has no --$key in uffdd --help"
done
SAN_WHO="uffd-client --help" checked "$T/help" "$CLIENT" --help || true
for word in $(grep -o -- '--[a-z][a-z-]*' "$T/help" | sort -u) \
	$(sed -n 's/^  \([a-z][a-z]*\)\( .*\)\{0,1\}$/\1/p' "$T/help"); do
	in_page "$M/uffd-client.1" "$word" || fail "uffd-client.1 does not document $word"
done
if command -v man >/dev/null; then
	for p in "$M"/*.[158]; do
		LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>"$T/warn" >/dev/null
		[ -s "$T/warn" ] && fail "$(basename "$p") renders with warnings: $(cat "$T/warn")"
	done
else
	skip_part "man pages rendered: man missing (Debian package man-db)"
fi
info "man pages cover uffdd --help, the configuration keys and uffd-client --help"

# The docs stand alone: every path of the repository they name exists (a
# program as its .c source, daemon/uffdd as daemon/main/uffdd.c, kernel/ paths also relative to kernel/, build
# output excepted), and none names a file outside the repository.
cd "$SRC"
python3 - README.md docs/*.md man/*.[158] kernel/README.md <<'PY' >"$T/paths" ||
import glob, os, re, sys
pat = re.compile(r'(?<![\w/.-])((?:daemon|client|proto|tests|kernel|systemd|docs|man|\.ci)/[A-Za-z0-9_./*{},-]*[A-Za-z0-9_*}])')
bad = 0
for f in sys.argv[1:]:
    t = open(f, encoding='utf-8').read().replace('\\-', '-')
    for m in pat.finditer(t):
        p = m.group(1)
        if any(c in p for c in '*{'):
            continue  # a pattern: client/cmd-*.c
        if p.startswith('kernel/build') or any(os.path.exists(c) for c in
                (p, p + '.c', os.path.join('kernel', p))) or glob.glob(
                os.path.join(os.path.dirname(p), '*',
                             os.path.basename(p) + '.c')):
            continue
        print(f'{f}: {p} does not exist'); bad = 1
    for out in ('DESIGN.md', 'FACTS.md', 'STYLE.md', '../shared'):
        if out in t:
            print(f'{f}: cites {out}, outside the repository'); bad = 1
sys.exit(bad)
PY
	fail "docs name paths that are not there: $(cat "$T/paths")"
info "every repository path the docs name exists; none names one outside"
