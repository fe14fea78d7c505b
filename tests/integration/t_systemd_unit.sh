#!/usr/bin/env bash
# systemd/uffdd.service passes `systemd-analyze verify`, with its man pages
# found in man/; make install installs the unit (with the installed path of
# uffdd), the tmpfiles.d entry, the example configuration and the man pages.
. "$SRC/tests/lib.sh"
command -v systemd-analyze >/dev/null || skip "systemd-analyze missing (Debian package systemd)"
command -v man >/dev/null || skip "man missing (Debian package man-db), needed to check Documentation="

# The unit as committed names /usr/sbin/uffdd, which verify requires to
# exist: check a copy that names the binary just built, and let man find the
# pages of this tree.
mkdir -p "$T/unit" "$T/man/man1" "$T/man/man5" "$T/man/man8"
sed "s|/usr/sbin/uffdd|$UFFDD|g" "$SRC/systemd/uffdd.service" >"$T/unit/uffdd.service"
cp "$SRC/man/uffd-client.1" "$T/man/man1/"
cp "$SRC/man/uffdd.conf.5" "$T/man/man5/"
cp "$SRC/man/uffdd.8" "$T/man/man8/"
MANPATH=$T/man systemd-analyze verify "$T/unit/uffdd.service" >"$T/verify.out" 2>&1 ||
	fail "systemd-analyze verify: $(cat "$T/verify.out")"
[ -s "$T/verify.out" ] && fail "systemd-analyze verify warns: $(cat "$T/verify.out")"
info "systemd-analyze verify: clean"
grep -q '^Type=notify$' "$SRC/systemd/uffdd.service" || fail "unit is not Type=notify"
grep -q '^Restart=on-failure$' "$SRC/systemd/uffdd.service" || fail "no Restart=on-failure"
grep -q '^WatchdogSec=' "$SRC/systemd/uffdd.service" || fail "no WatchdogSec"
# The example configuration is valid (its TLS files do not exist here).
checked "$T/n.out" "$UFFDD" -n --config "$SRC/systemd/uffdd.conf" --insecure --ca /dev/null &&
	fail "insecure with ca accepted"
sed -e '/^ca /d' -e '/^cert /d' -e '/^key /d' "$SRC/systemd/uffdd.conf" >"$T/example.conf"
checked "$T/n.out" "$UFFDD" -n --config "$T/example.conf" --insecure ||
	fail "example configuration refused: $(cat "$T/n.out")"

# make install into a staging directory.
[ -f "$B/Makefile" ] || skip "no Makefile in $B"
make -C "$B" install DESTDIR="$T/root" >"$T/install.out" 2>&1 ||
	fail "make install: $(tail -n 20 "$T/install.out")"
prefix=$(sed -n 's/^prefix = //p' "$B/Makefile")
for f in lib/systemd/system/uffdd.service lib/tmpfiles.d/uffdd.conf \
	share/man/man8/uffdd.8 share/man/man1/uffd-client.1 share/man/man5/uffdd.conf.5 \
	sbin/uffdd bin/uffd-client; do
	[ -f "$T/root$prefix/$f" ] || fail "make install did not install $prefix/$f"
done
grep -q "^ExecStart=$prefix/sbin/uffdd --foreground$" "$T/root$prefix/lib/systemd/system/uffdd.service" ||
	fail "installed unit does not name $prefix/sbin/uffdd"
# The configuration goes where the installed daemon reads it, whatever the
# prefix.
conf=$("$UFFDD" --help 2>&1 | sed -n 's/.*(default \(\/[^)]*\.conf\)).*/\1/p')
[ -n "$conf" ] || fail "uffdd --help names no default configuration file"
[ -f "$T/root$conf" ] || fail "make install did not install $conf (prefix $prefix): $(cd "$T/root" && find . -name 'uffdd.conf*')"
[ "$(stat -c %a "$T/root$conf")" = 600 ] || fail "$conf is not mode 600"
info "make install: unit, tmpfiles.d, man pages, binaries, $conf"

