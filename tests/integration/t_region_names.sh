#!/usr/bin/env bash
# A legitimate source is never refused for its region names: a process
# that maps, privately, a file whose path holds a terminal escape, a byte
# that is not UTF-8 and a C1 control migrates byte-exact. Both daemons
# read /proc/PID/maps the same way and escape those bytes as the kernel
# escapes a newline there (\ooo), so the destination finds the same
# file under the same name, and nothing raw reaches the terminal or logs.
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (to check the output)"
DIR=/var/tmp/uffdd-region-names-$$
mkdir -p "$DIR" || skip "cannot create $DIR"
on_cleanup "rm -rf $DIR"
case "$(stat -f -c %T "$DIR")" in
tmpfs | ramfs) skip "$DIR is not on a disk filesystem" ;;
esac
# No blank or glob character: migrate splits the workload's arguments.
FILE=$DIR/data-$'\x1b'X-$'\xff'-$'\xc2\x9b'
want="$DIR/data-\\033X-\\377-\\302\\233"
migrate 4M 1 2 "--kind file-private --file $FILE" "--kind file-private --file $FILE"
info "$(grep '^attached' "$T/attach.out")"
grep -qF "attached 0x500000000000-0x500000400000 $want (" "$T/attach.out" ||
	fail "region name not escaped as in /proc/PID/maps: $(cat -v "$T/attach.out")"
"$CLIENT" --control "$dst_SOCK" status >"$T/status.out"
python3 -c 'import sys
for f in sys.argv[1:]:
    try:
        t = open(f, "rb").read().decode("utf-8")
    except UnicodeDecodeError:
        t = "\0"
    if any(ord(c) < 32 and c != "\n" or 127 <= ord(c) < 160 for c in t):
        sys.exit(f)' "$T/attach.out" "$T/status.out" "$T/status.json" "$T/src.log" "$T/dst.log" 2>"$T/bad" ||
	fail "$(cat "$T/bad") is not printable UTF-8: $(cat -v "$(cat "$T/bad")")"
