#!/usr/bin/env bash
# The man pages match --help: every option of uffdd, every command and
# option of uffd-client, every key of the configuration is documented, and
# the pages render without warnings.
. "$SRC/tests/lib.sh"
M=$SRC/man
# In roff, "-" is written "\-".
in_page() { grep -q -- "$2" <(sed 's/\\-/-/g' "$1"); }

for opt in $("$UFFDD" --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
	in_page "$M/uffdd.8" "$opt" || fail "uffdd.8 does not document $opt"
done
for key in $("$UFFDD" -n --insecure --config /dev/null | sed 's/^# //' | awk '{print $1}'); do
	in_page "$M/uffdd.conf.5" "^\.B[IR]* $key" || fail "uffdd.conf.5 does not document key $key"
	"$UFFDD" --help | grep -q -- "--$key" || fail "key $key has no --$key in uffdd --help"
done
"$CLIENT" --help >"$T/help" 2>&1 || true
for word in $(grep -o -- '--[a-z][a-z-]*' "$T/help" | sort -u) \
	$(sed -n 's/^  \([a-z][a-z]*\) .*/\1/p' "$T/help"); do
	in_page "$M/uffd-client.1" "$word" || fail "uffd-client.1 does not document $word"
done
if command -v man >/dev/null; then
	for p in "$M"/*.[158]; do
		LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>"$T/warn" >/dev/null
		[ -s "$T/warn" ] && fail "$(basename "$p") renders with warnings: $(cat "$T/warn")"
	done
fi
info "man pages cover uffdd --help, the configuration keys and uffd-client --help"
