#!/bin/bash
# mkconfig.sh SRCTREE OBJDIR FRAGMENT
# tinyconfig plus our fragment, then olddefconfig; warn about every fragment
# line Kconfig did not keep (a missing dependency).
set -eo pipefail
src=$(realpath "$1") frag=$(realpath "$3")
mkdir -p "$2"
obj=$(realpath "$2")
mkdir -p "$obj"
make -s -C "$src" O="$obj" tinyconfig >/dev/null
grep -v '^#' "$frag" | sed '/^$/d' >> "$obj/.config"
make -s -C "$src" O="$obj" olddefconfig >/dev/null 2>&1
miss=0
while IFS= read -r line; do
	case $line in ''|\#*) continue;; esac
	sym=${line%%=*}
	val=${line#*=}
	if [ "$val" = n ]; then
		grep -q "^$sym=" "$obj/.config" && { echo "config: $sym should be off"; miss=1; }
	elif ! grep -qx "$line" "$obj/.config"; then
		echo "config: $line not kept (dependency missing?)"
		miss=1
	fi
done < "$frag"
[ $miss = 0 ] && echo "config: $obj/.config complete"
exit 0
