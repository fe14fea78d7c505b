#!/bin/bash
# mkinitramfs.sh TESTDIR OUT.cpio.gz [MODULE.ko]
# busybox-static, the static kernel tests (run in the order of ORDER), the
# test module built for the kernel this image boots and, if UFFDD_TESTS
# names a directory of static test binaries, uffdd's tests; if UFFDD_BUILD
# names a uffdd build directory, uffdd and its migration test.
set -eo pipefail
tests=$1 out=$2 ko=$3
here=$(cd "$(dirname "$0")" && pwd)
bb=$(command -v busybox || true)
[ -x /bin/busybox ] && bb=/bin/busybox
if ! file -L "$bb" | grep -q 'statically linked'; then
	echo "mkinitramfs: need busybox-static (apt-get install busybox-static)" >&2
	exit 1
fi
root=$(mktemp -d /var/tmp/uffdd-initramfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,tests,etc}
cp "$bb" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
cp "$here/init.sh" "$root/init"
chmod +x "$root/init"
order="access_hints wp_unprotect pagemap_shmem pagemap_bench"
[ -n "$ko" ] && order="$order changepte_ksm"
order="$order kvm_ksm"
for t in $order; do cp "$tests/$t" "$root/tests/"; done
if [ -n "$ko" ]; then
	mkdir -p "$root/modules"
	cp "$ko" "$root/modules/"
fi
echo "$order" > "$root/tests/ORDER"
if [ -n "$UFFDD_TESTS" ] && [ -d "$UFFDD_TESTS" ]; then
	mkdir -p "$root/uffdd-tests"
	cp "$UFFDD_TESTS"/* "$root/uffdd-tests/"
fi
# uffdd itself from a build directory (UFFDD_BUILD), with the shared
# libraries and the dynamic loader its programs need, and the migration
# test that drives it (tests/uffdd_migrate.sh, run as uffdd/migrate).
if [ -n "$UFFDD_BUILD" ]; then
	progs="daemon/uffdd client/uffd-client tests/workload tests/memhash"
	mkdir -p "$root/uffdd/bin" "$root/uffdd-tests"
	for p in $progs; do
		[ -x "$UFFDD_BUILD/$p" ] || { echo "mkinitramfs: no $UFFDD_BUILD/$p" >&2; exit 1; }
		cp "$UFFDD_BUILD/$p" "$root/uffdd/bin/"
		ldd "$UFFDD_BUILD/$p" | grep -oE '/[^ ]+' | while read -r lib; do
			mkdir -p "$root$(dirname "$lib")"
			cp -L "$lib" "$root$lib"
		done
	done
	cp "$here/../tests/uffdd_migrate.sh" "$root/uffdd-tests/migrate"
	chmod +x "$root/uffdd-tests/migrate"
	extra=" uffdd/migrate"
fi
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 > "$out"
echo "initramfs: $out ($(du -h "$out" | cut -f1)): $order${extra:-}"
