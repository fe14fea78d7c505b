#!/usr/bin/env bash
# The Debian package: dpkg-buildpackage -us -uc -b builds
# uffdd_VERSION_amd64.deb from a copy of the tree, lintian finds no error
# in it, dpkg -i installs it (the engine's user made by sysusers.d), the
# installed uffdd --check works, and two daemons started from the
# installed binaries migrate a process. The package is purged at the end
# unless it was installed before the test.
. "$SRC/tests/lib.sh"
need_root
for t in dpkg-buildpackage dh lintian git; do
	command -v "$t" >/dev/null || skip "$t missing (apt-get install debhelper lintian)"
done
[ -e "$SRC/.git" ] || skip "not a git checkout: the tree's files are those git knows"
if dpkg-query -W -f='${Status}' uffdd 2>/dev/null | grep -q "ok installed"; then
	skip "a uffdd package is installed already: not replaced by a test"
fi
version=$(sed -n 's/^AC_INIT(\[uffdd\], \[\([^]]*\)\].*/\1/p' "$SRC/configure.ac")
head -n 1 "$SRC/debian/changelog" | grep -q "^uffdd ($version)" ||
	fail "debian/changelog is not at configure's version $version"

# A copy of what git knows (committed or not), not the build output: a
# package build configures in its tree.
mkdir -p "$T/pkg/uffdd"
(cd "$SRC" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) |
	tar -C "$T/pkg/uffdd" -xf -
(cd "$T/pkg/uffdd" && dpkg-buildpackage -us -uc -b) >"$T/build.log" 2>&1 ||
	fail "dpkg-buildpackage: $(tail -n 30 "$T/build.log")"
deb=$T/pkg/uffdd_${version}_amd64.deb
[ -f "$deb" ] || fail "no $deb: $(ls "$T/pkg")"
info "built $(basename "$deb")"

lintian --tag-display-limit 0 "$deb" >"$T/lintian.out" 2>&1 || true
grep -q '^E: ' "$T/lintian.out" && fail "lintian errors: $(grep '^E: ' "$T/lintian.out")"
info "lintian: no errors ($(grep -c '^W: ' "$T/lintian.out") warnings)"

dpkg-deb -c "$deb" >"$T/contents"
for f in ./usr/sbin/uffdd ./usr/bin/uffd-client ./lib/systemd/system/uffdd.service \
	./usr/lib/tmpfiles.d/uffdd.conf ./usr/lib/sysusers.d/uffdd.conf \
	./etc/uffdd/uffdd.conf.example ./usr/share/man/man8/uffdd.8.gz \
	./usr/share/man/man1/uffd-client.1.gz ./usr/share/man/man5/uffdd.conf.5.gz \
	./usr/share/bash-completion/completions/uffd-client; do
	grep -q " $f\$" "$T/contents" || fail "the package lacks $f"
done

on_cleanup "dpkg -P uffdd >/dev/null 2>&1"
dpkg -i "$deb" >"$T/install.log" 2>&1 || fail "dpkg -i: $(cat "$T/install.log")"
getent passwd uffdd >/dev/null || fail "no user uffdd after installation"
/usr/sbin/uffdd --version | grep -q "^uffdd $version" || fail "installed uffdd --version: $(/usr/sbin/uffdd --version)"
# The example configuration names TLS files an operator makes: with
# them (the tests' own), --check passes as the unit's ExecStartPre runs it.
default_pki
cp "$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key" /etc/uffdd/
/usr/sbin/uffdd --check >"$T/check.out" 2>&1 || fail "installed uffdd --check: $(cat "$T/check.out")"
grep -q "^listen " "$T/check.out" || fail "uffdd --check printed no configuration"
rm -f /etc/uffdd/ca.crt /etc/uffdd/node.crt /etc/uffdd/node.key
info "installed: uffdd --check passes"

# A migration between two daemons of the installed binaries.
UFFDD=/usr/sbin/uffdd
CLIENT=/usr/bin/uffd-client
start_daemon src
start_daemon dst
migrate 16M 1 2
info "migrated with the installed binaries"
