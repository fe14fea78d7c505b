#!/bin/bash
# apply.sh SRC TREE PATCHDIR PATCH...
# Make TREE a git repository holding the pristine SRC (tag "base") and apply
# each patch with git am.  Refuses to run over uncommitted work in TREE.
set -eo pipefail
src=$1 tree=$2 pdir=$3
shift 3

if [ ! -d "$tree/.git" ]; then
	echo "apply: creating git tree $tree (one-off, about a minute)"
	rm -rf "$tree"
	mkdir -p "$tree"
	cp -a "$src/." "$tree/"
	rm -f "$tree/.unpacked"
	git -C "$tree" init -q
	git -C "$tree" config user.name uffdd-kernel
	git -C "$tree" config user.email uffdd-kernel@localhost
	git -C "$tree" config gc.auto 0
	git -C "$tree" add -A -f .
	git -C "$tree" commit -q -m "Debian linux-source-6.1 (pristine)"
	git -C "$tree" tag base
fi

if [ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ]; then
	echo "apply: $tree has uncommitted changes; commit or stash them first" >&2
	exit 1
fi
# Re-applying rewrites the patched files and their mtimes, which makes
# kbuild recompile everything that includes a touched header: skip it when
# the series branch already holds exactly these patches.
hash=$(cd "$pdir" && cat "$@" /dev/null | sha1sum | cut -d' ' -f1)
stamp="$tree/.git/uffdd-series"
if [ "$(git -C "$tree" symbolic-ref -q --short HEAD)" = series ] &&
   [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash $(git -C "$tree" rev-parse HEAD)" ]; then
	echo "apply: $tree already has this series"
	exit 0
fi
git -C "$tree" am --abort >/dev/null 2>&1 || true
git -C "$tree" checkout -q -B series base
for p in "$@"; do
	echo "apply: $p"
	git -C "$tree" am -q --whitespace=nowarn "$pdir/$p"
done
git -C "$tree" log --oneline base..HEAD
echo "$hash $(git -C "$tree" rev-parse HEAD)" > "$stamp"
