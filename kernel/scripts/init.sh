#!/bin/busybox sh
# /init of the test VM: mount the basics, put swap on zram, run every test
# in /tests (then uffdd's tests in /uffdd-tests, if any were packed), print
# one verdict line per test and power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo "VMTEST-BEGIN $(uname -r) $(cat /proc/cmdline)"

if [ -e /sys/block/zram0/disksize ]; then
	echo 1536M > /sys/block/zram0/disksize
	mkswap /dev/zram0 >/dev/null && swapon /dev/zram0
fi
cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null | sed "s/^/clocksource: /"
grep -E 'SwapTotal|MemTotal' /proc/meminfo | tr -s ' ' | tr '\n' ' '; echo

run() {
	name=$1; shift
	out=$("$@" 2>&1); rc=$?
	echo "$out"
	echo "$out" | grep -qE "^(PASS|FAIL|ERROR|SKIP) " ||
		echo "ERROR $name: exited $rc without a verdict"
}

# ktest=a,b on the kernel command line runs only those tests (benchmarks);
# the name uffdd stands for uffdd's tests.
only=$(sed -n 's/.*ktest=\([^ ]*\).*/\1/p' /proc/cmdline | tr , ' ')
for t in ${only:-$(cat /tests/ORDER)}; do
	[ "$t" = uffdd ] || run "$t" "/tests/$t"
done
if { [ -z "$only" ] || echo " $only " | grep -q " uffdd "; } && [ -d /uffdd-tests ]; then
	for t in /uffdd-tests/*; do
		[ -x "$t" ] || continue
		n=uffdd/$(basename "$t")
		if "$t" >/tmp/out 2>&1; then
			grep -E '^(INFO|BENCH) ' /tmp/out
			echo "PASS $n"
		else
			rc=$?
			tail -40 /tmp/out
			echo "FAIL $n: exit $rc"
		fi
	done
fi
echo "VMTEST-END"
sync
reboot -f
