#!/bin/bash
# check.sh SRC CHECKDIR KDIR JOBS
# The fast CI check: apply kernel/series to a pristine copy of the source
# with patch(1), configure it (tinyconfig + fragment) and compile only the
# objects built from the files the series touches, with -Werror.  Minutes,
# not a full build.  Exits non-zero if a patch does not apply or a file
# does not compile.
set -eo pipefail
src=$1 dir=$2 kdir=$3 jobs=${4:-2}
t0=$(date +%s)
series=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$kdir/series")
[ -n "$series" ] || { echo "check: empty series" >&2; exit 1; }

# Hard-linked copy of the pristine tree; every file a patch touches is
# copied for real first, so patching never writes through into $src.
rm -rf "$dir"
mkdir -p "$dir"
cp -al "$src" "$dir/linux"
rm -f "$dir/linux/.unpacked"
touched=$(for p in $series; do
	sed -n 's|^+++ b/||p' "$kdir/patches/$p"; done | sort -u)
for f in $touched; do
	if [ -e "$dir/linux/$f" ]; then
		rm "$dir/linux/$f"
		cp "$src/$f" "$dir/linux/$f"
	fi
done
for p in $series; do
	if ! patch -d "$dir/linux" -p1 --batch --forward --no-backup-if-mismatch \
		-i "$kdir/patches/$p" >"$dir/patch.log" 2>&1; then
		cat "$dir/patch.log"
		echo "check: FAIL: $p does not apply to $(cat "$kdir/build/VERSION" | head -1)" >&2
		exit 1
	fi
	echo "check: applied $p"
done

# Objects to compile: each touched .c, plus the users of touched headers
# that the series changes the interface of.
objs=""
for f in $touched; do
	case $f in
	virt/kvm/*.c)	objs="$objs arch/x86/kvm/";;	# built from arch/x86/kvm
	*.c)		objs="$objs ${f%.c}.o";;
	include/linux/userfaultfd_k.h|include/linux/shmem_fs.h)
			objs="$objs mm/userfaultfd.o mm/shmem.o fs/userfaultfd.o mm/hugetlb.o mm/memory.o";;
	include/linux/mmu_notifier.h)
			objs="$objs mm/mmu_notifier.o mm/ksm.o mm/memory.o";;
	esac
done
objs=$(echo $objs | tr ' ' '\n' | sort -u | tr '\n' ' ')

"$kdir/scripts/mkconfig.sh" "$dir/linux" "$dir/obj" "$kdir/config.fragment"
cc=gcc
command -v ccache >/dev/null && cc="ccache gcc"
export CCACHE_BASEDIR=$dir
make -s -C "$dir/linux" O="$dir/obj" -j"$jobs" CC="$cc" prepare
echo "check: compiling $objs"
if ! make -s -C "$dir/linux" O="$dir/obj" -j"$jobs" CC="$cc" KCFLAGS=-Werror $objs; then
	echo "check: FAIL: touched files do not compile" >&2
	exit 1
fi
echo "check: PASS: $(echo $series | wc -w) patches apply, $(echo $objs | wc -w) targets compile ($(( $(date +%s) - t0 )) s)"
