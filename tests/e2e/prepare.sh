#!/usr/bin/env bash
# Prepares the QEMU end-to-end guest once, into a cache directory outside
# git (default /var/tmp/uffdd-e2e): Debian's kernel (vmlinuz, from the
# linux-image package, fetched with apt-get download and unpacked, never
# installed on the host) and an initramfs with busybox, the static memory
# checker memcheck and an /init that runs it on the serial console.
# Installs qemu-system-x86 and busybox-static when missing (as root).
# Prints the cache directory; exit 77 with "SKIP: reason" when something
# cannot be had.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${1:-${UFFDD_E2E_CACHE:-/var/tmp/uffdd-e2e}}
skip() { echo "SKIP: $*"; exit 77; }
mkdir -p "$CACHE"

have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
want=()
command -v qemu-system-x86_64 >/dev/null || want+=(qemu-system-x86)
have busybox-static || want+=(busybox-static)
command -v cpio >/dev/null || want+=(cpio)
if [ ${#want[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || skip "missing ${want[*]} and not root to install them"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${want[@]}" >&2 ||
		{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${want[@]}" >&2; } ||
		skip "cannot install ${want[*]} (Debian packages)"
fi
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 missing (Debian package qemu-system-x86)"
command -v cpio >/dev/null || skip "cpio missing"

# The kernel: Debian's, with the 8250 serial console built in, and its
# virtio modules for a balloon (loaded when the command line asks:
# uffdd.balloon); both from one package, so that they match.
VIRTIO="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_balloon"
if [ ! -f "$CACHE/vmlinuz" ] || [ ! -f "$CACHE/modules/virtio_balloon.ko" ]; then
	kpkg() {
		apt-cache depends linux-image-amd64 2>/dev/null |
			sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1
	}
	pkg=$(kpkg)
	if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
		apt-get update -q >&2 || true
		pkg=$(kpkg)
	fi
	[ -n "$pkg" ] || skip "Debian's linux-image-amd64 is not in the apt lists (apt-get update)"
	(cd "$CACHE" && apt-get download "$pkg" >&2 2>/dev/null) ||
		skip "cannot download $pkg from the apt archive"
	deb=$(mktemp -d "$CACHE/deb.XXXXXX")
	dpkg-deb -x "$CACHE"/"$pkg"_*.deb "$deb"
	cp "$deb"/boot/vmlinuz-* "$deb.vmlinuz"
	mkdir -p "$deb.modules"
	for m in $VIRTIO; do
		find "$deb"/lib/modules -name "$m.ko" -exec cp {} "$deb.modules/" \;
	done
	rm -rf "$CACHE/modules"
	mv "$deb.modules" "$CACHE/modules"
	mv "$deb.vmlinuz" "$CACHE/vmlinuz"
	rm -f "$CACHE/initrd.gz"
	rm -rf "$deb" "$CACHE"/"$pkg"_*.deb
fi

# The initramfs, rebuilt when memcheck.c or what it holds changes
# (INITRD_VERSION).
INITRD_VERSION=2
if [ ! -f "$CACHE/initrd.gz" ] || [ "$HERE/memcheck.c" -nt "$CACHE/initrd.gz" ] ||
	[ "$(cat "$CACHE/initrd.version" 2>/dev/null)" != "$INITRD_VERSION" ]; then
	bb=/bin/busybox # busybox-static's, which needs no libraries
	# Private names: two test runs may prepare at once.
	root=$(mktemp -d "$CACHE/root.XXXXXX")
	mkdir -p "$root"/{bin,dev,proc,sys,tmp}
	cp "$bb" "$root/bin/busybox"
	for a in sh mount echo cat sleep reboot insmod sed; do ln -s busybox "$root/bin/$a"; done
	mkdir -p "$root/lib/modules"
	cp "$CACHE"/modules/*.ko "$root/lib/modules/"
	gcc -O2 -static -Wall -Wextra -o "$root/bin/memcheck" "$HERE/memcheck.c" ||
		skip "cannot build memcheck statically (libc6-dev)"
	cat >"$root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "guest: init up"
# uffdd.balloon: the virtio modules, for a virtio-balloon device;
# uffdd.scratch=N: N MiB written and freed before memcheck starts, so
# that free guest memory holds data (a balloon then gives back pages the
# source had bytes in).
case " $(cat /proc/cmdline) " in
*" uffdd.balloon "*)
	for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_balloon; do
		insmod /lib/modules/$m.ko || echo "guest: insmod $m failed"
	done
	echo "guest: balloon driver loaded"
	;;
esac
scratch=$(sed -n 's/.*uffdd\.scratch=\([0-9]*\).*/\1/p' /proc/cmdline)
/bin/memcheck 256 ${scratch:-0}
echo "guest: memcheck exited"
reboot -f
INIT
	chmod +x "$root/init"
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$root.gz"
	mv "$root.gz" "$CACHE/initrd.gz"
	echo "$INITRD_VERSION" >"$CACHE/initrd.version"
	rm -rf "$root"
fi
echo "$CACHE"
