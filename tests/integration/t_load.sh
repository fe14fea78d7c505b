#!/usr/bin/env bash
# build: plain sanitized
# 8 migrations of 256 MiB at once through one pair of daemons, 16 faulting
# threads each, all byte-exact; afterwards the daemons' descriptor counts
# and resident memory are back where they started.
. "$SRC/tests/lib.sh"
need_root
make_hosts
# AddressSanitizer's allocator keeps freed memory (quarantine, shadow), so
# resident memory says nothing there. run.sh runs this test on both builds
# (PLAIN_BUILDDIR, as tests/setup.sh check sets it): the plain run bounds
# resident memory; the sanitized run has ASan check every access under
# this load, and LeakSanitizer every allocation left at shutdown.
start_daemon src
start_daemon dst
fds() { ls "/proc/$1/fd" | wc -l; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# One small migration first, so that one-time allocations are made.
run_batch() {
	local n=$1 size=$2 threads=$3 i base end range
	for ((i = 0; i < n; i++)); do
		base=$((0x500000000000 + i * 0x100000000))
		start_workload "WS$i" source --size "$size" --threads 1 --base "$base"
		start_workload "WD$i" dest --size "$size" --threads "$threads" --base "$base"
	done
	for ((i = 0; i < n; i++)); do
		base=$((0x500000000000 + i * 0x100000000))
		end=$((base + $(numfmt --from=iec "$size")))
		range=$(printf '%x-%x' "$base" "$end")
		eval "ID$i=\$(\"\$CLIENT\" --control \"\$src_SOCK\" export \"\$WS$i\" --range $range)"
		eval "src_hash H$i \"\$WS$i\" $base $end"
	done
	for ((i = 0; i < n; i++)); do
		base=$((0x500000000000 + i * 0x100000000))
		end=$((base + $(numfmt --from=iec "$size")))
		range=$(printf '%x-%x' "$base" "$end")
		eval "\"\$CLIENT\" --control \"\$dst_SOCK\" attach \"\$WD$i\" --from $src_ADDR:$src_PORT --id \"\$ID$i\" --range $range >/dev/null"
		eval "kill -USR1 \"\$WD$i\""
	done
	for ((i = 0; i < n; i++)); do
		base=$((0x500000000000 + i * 0x100000000))
		end=$((base + $(numfmt --from=iec "$size")))
		eval "\"\$CLIENT\" --control \"\$dst_SOCK\" wait \"\$ID$i\" --timeout 600 >/dev/null" ||
			fail "migration $i did not complete"
		wait_verified "WD$i" >/dev/null
		eval "h=\$(dst_hash H$i \"\$WD$i\" $base $end)"
		eval "[ \"\$h\" = \"\$H$i\" ]" || fail "migration $i: destination differs"
		eval "kill \"\$WD$i\""
	done
}

run_batch 1 16M 2
sleep 0.5
fd0s=$(fds "$src_PID") fd0d=$(fds "$dst_PID") rss0s=$(rss "$src_PID") rss0d=$(rss "$dst_PID")
info "before: source $fd0s fds ${rss0s} KiB, destination $fd0d fds ${rss0d} KiB"
run_batch 8 256M 16
# The lanes close after the migrations: until the counts are down again
# (or 10 s went by, when they stay up).
for _ in $(seq 100); do
	[ "$(fds "$src_PID")" -le "$fd0s" ] && [ "$(fds "$dst_PID")" -le "$fd0d" ] && break
	sleep 0.1
done
fd1s=$(fds "$src_PID") fd1d=$(fds "$dst_PID") rss1s=$(rss "$src_PID") rss1d=$(rss "$dst_PID")
info "after:  source $fd1s fds ${rss1s} KiB, destination $fd1d fds ${rss1d} KiB"
[ "$fd1s" -le "$fd0s" ] || fail "source daemon leaks descriptors ($fd0s -> $fd1s)"
[ "$fd1d" -le "$fd0d" ] || fail "destination daemon leaks descriptors ($fd0d -> $fd1d)"
if [ "$SANITIZED" = 1 ]; then
	info "sanitized build: memory kept is LeakSanitizer's to find at shutdown (resident memory is the plain run's)"
else
	# Allocator slack is allowed; per-migration buffers (MiBs each) are not.
	[ "$rss1s" -le $((rss0s + 8192)) ] || fail "source daemon kept memory ($rss0s -> $rss1s KiB)"
	[ "$rss1d" -le $((rss0d + 8192)) ] || fail "destination daemon kept memory ($rss0d -> $rss1d KiB)"
fi
