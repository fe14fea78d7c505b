#!/bin/bash
# vmtest.sh BUILDDIR
# Boot the patched and then the unpatched kernel with the same tests (the
# images differ only in the test module, built per kernel) and
# judge the results:
#   - on the patched kernel every test must print PASS;
#   - on the unpatched kernel each kernel-patch test must print FAIL, i.e.
#     show the old behaviour (ERROR means the test could not tell: failure);
#   - pagemap_bench: patched time / unpatched time at most 1.2 for both
#     read sizes;
#   - uffdd's own tests (uffdd/*) must pass on both kernels, and uffdd must
#     report the access hints (with hinted pages) and shmem PM_SWAP on the
#     patched kernel only.
# Prints one "PASS name ..." / "FAIL name ..." line per check; exit 1 on any FAIL.
set -o pipefail
B=$1
here=$(cd "$(dirname "$0")" && pwd)
fail=0
verdict() {	# verdict PASS|FAIL name text
	echo "$1 $2${3:+: $3}"
	[ "$1" = PASS ] || fail=1
}

"$here/runvm.sh" "$B/obj-patched/arch/x86/boot/bzImage" "$B/initramfs-patched.cpio.gz" patched \
	"$B/vm-patched.log" >/dev/null || verdict FAIL boot-patched "no VMTEST-END, see $B/vm-patched.log"
"$here/runvm.sh" "$B/obj-base/arch/x86/boot/bzImage" "$B/initramfs-base.cpio.gz" unpatched \
	"$B/vm-unpatched.log" >/dev/null || verdict FAIL boot-unpatched "no VMTEST-END, see $B/vm-unpatched.log"

# Extra benchmark-only boots, alternating, so that a burst of load on the
# (shared, noisy) host does not land on one kernel only: figures are the
# medians over all boots of each kernel.
rm -f "$B"/bench-*.log
for i in $(seq 1 "${BENCH_ROUNDS:-2}"); do
	for k in patched base; do
		VM_APPEND="ktest=pagemap_bench,wp_unprotect" "$here/runvm.sh" \
			"$B/obj-$k/arch/x86/boot/bzImage" "$B/initramfs-$k.cpio.gz" \
			"$k-bench" "$B/bench-$k-$i.log" >/dev/null
	done
done

echo "--- results (logs: $B/vm-patched.log, $B/vm-unpatched.log)"
line() { grep -E "^(PASS|FAIL|ERROR|SKIP) $2(:|$)" "$B/vm-$1.log" | head -1; }
tests=$(grep -h -oE '^(PASS|FAIL|ERROR|SKIP) [a-z_/0-9.-]+' "$B"/vm-patched.log "$B"/vm-unpatched.log |
	awk '{print $2}' | sort -u)
for t in $tests; do
	p=$(line patched "$t"); u=$(line unpatched "$t")
	grep -E "^INFO $t:" "$B/vm-patched.log" | sed 's/^/  patched:   /'
	grep -E "^INFO $t:" "$B/vm-unpatched.log" | sed 's/^/  unpatched: /'
	case $t in
	uffdd/*)
		[ "${p%% *}" = PASS ] && [ "${u%% *}" = PASS ] &&
			verdict PASS "$t" "patched and unpatched" ||
			verdict FAIL "$t" "patched: ${p:-none}; unpatched: ${u:-none}"
		;;
	pagemap_bench)
		[ "${p%% *}" = PASS ] || verdict FAIL "$t" "patched: ${p:-none}"
		;;
	kvm_ksm)
		# optional: needs KVM inside the TCG guest (nested SVM + NPT)
		if [ "${p%% *}" = SKIP ] || [ "${u%% *}" = SKIP ]; then
			echo "SKIP $t: patched: ${p#*: }; unpatched: ${u#*: }"
			continue
		fi
		pf=$(awk '$1=="BENCH" && $2=="kvm_ksm_faults" {print $3}' "$B/vm-patched.log")
		uf=$(awk '$1=="BENCH" && $2=="kvm_ksm_faults" {print $3}' "$B/vm-unpatched.log")
		# Optional and not counted: on the patched kernel the first
		# KVM_RUN of this test sometimes never returns (no exit at all,
		# see README "Open issues"); report it, do not gate on it.
		if [ -n "$pf" ] && [ -n "$uf" ] && [ "$pf" -lt "$uf" ]; then
			echo "PASS $t: KVM page faults during KSM merge + guest writes: patched $pf, unpatched $uf"
		else
			echo "FAIL $t (optional, not counted): patched ${pf:-?} faults, unpatched ${uf:-?} (${p:-no result} / ${u:-no result})"
		fi
		;;
	*)
		if [ "${p%% *}" = PASS ]; then
			verdict PASS "$t" "${p#*: }"
		else
			verdict FAIL "$t" "patched kernel: ${p:-no result}"
		fi
		if [ "${u%% *}" = FAIL ]; then
			verdict PASS "$t/unpatched-old-behaviour" "${u#*: }"
		else
			verdict FAIL "$t/unpatched-old-behaviour" "unpatched kernel: ${u:-no result}"
		fi
		;;
	esac
done

# uffdd inside the VM (uffdd/migrate, packed when a uffdd build exists): the
# daemon must find and use the patched kernel's features and find none on
# the unpatched one; the memfd case means something only with pages swapped.
fig() { awk -v k="$2" '$1=="BENCH" && $2==k {print $3; exit}' "$B/vm-$1.log"; }
if grep -qE '^(PASS|FAIL) uffdd/migrate' "$B/vm-patched.log" "$B/vm-unpatched.log"; then
	for k in patched unpatched; do
		al=$(fig $k uffdd_access_likely) hi=$(fig $k uffdd_anon_hinted)
		ps=$(fig $k uffdd_shmem_pm_swap) sw=$(fig $k uffdd_memfd_swapped)
		if [ $k = patched ]; then want="1 >0 1"; else want="0 0 0"; fi
		got="${al:-?} ${hi:-?} ${ps:-?}"
		case "$k:$got" in
		patched:"1 "[1-9]*" 1" | unpatched:"0 0 0")
			verdict PASS "uffdd/kernel-features/$k" "access_likely $al, hinted pages $hi, shmem_pm_swap $ps" ;;
		*)
			verdict FAIL "uffdd/kernel-features/$k" "access_likely, hinted pages, shmem_pm_swap: want $want, got $got" ;;
		esac
		if [ "${sw:-0}" -ge 1000 ]; then
			verdict PASS "uffdd/memfd-swapped/$k" "$sw source pages were swapped out at freeze"
		else
			verdict FAIL "uffdd/memfd-swapped/$k" "only ${sw:-0} source pages swapped out: the memfd case proves nothing"
		fi
	done
fi

# Pre-copy on 6.1: both kernels track writes with synchronous uffd-wp (the
# daemon's probe and its log say so; byte-exactness is uffdd/migrate's).
# The daemon un-protects a 64 KiB block per write fault; with patch 4 the
# rest of the block is then writable, so the process takes fewer faults per
# dirty page: at most half the unpatched kernel's.
if grep -q '^BENCH uffdd_precopy_sync' "$B/vm-patched.log" "$B/vm-unpatched.log"; then
	ps=$(fig patched uffdd_precopy_sync) us=$(fig unpatched uffdd_precopy_sync)
	pw=$(fig patched uffdd_wp_unprotect_writable) uw=$(fig unpatched uffdd_wp_unprotect_writable)
	pf=$(fig patched uffdd_precopy_faults_per_100) uf=$(fig unpatched uffdd_precopy_faults_per_100)
	for k in patched unpatched; do
		echo "INFO uffdd/precopy-syncwp/$k: $(fig $k uffdd_precopy_dirty_pages) dirty pages," \
			"$(fig $k uffdd_precopy_answered) write faults answered by the daemon," \
			"$(fig $k uffdd_precopy_faults) taken by the process"
	done
	what="sync tracker $ps/$us, probe's writable un-protect $pw/$uw, process faults per 100 dirty pages $pf/$uf (patched/unpatched)"
	if [ "$ps$us" = 11 ] && [ "$pw$uw" = 10 ] && [ "${pf:--1}" -ge 0 ] &&
		[ "${uf:-0}" -gt 0 ] && [ $((${pf:-0} * 2)) -le "${uf:-0}" ]; then
		verdict PASS uffdd/precopy-syncwp "$what"
	else
		verdict FAIL uffdd/precopy-syncwp "$what; want 1/1, 1/0 and patched at most half"
	fi
fi

# median of one BENCH figure over the given logs
median() {
	local k=$1; shift
	awk -v k="$k" '$1=="BENCH" && $2==k {print $3}' "$@" | sort -g |
		awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'
}
for k in wp_toggle_us; do
	p=$(median $k "$B/vm-patched.log" "$B"/bench-patched-*.log)
	u=$(median $k "$B/vm-unpatched.log" "$B"/bench-base-*.log)
	echo "INFO $k: patched $p, unpatched $u (medians over $(ls "$B"/bench-base-*.log 2>/dev/null | wc -l) + 1 boots each)"
done

# pagemap cost: patched vs unpatched, same vmtest run
for k in pagemap_8B_ms pagemap_64K_ms; do
	p=$(median $k "$B/vm-patched.log" "$B"/bench-patched-*.log)
	u=$(median $k "$B/vm-unpatched.log" "$B"/bench-base-*.log)
	if [ -z "$p" ] || [ -z "$u" ]; then
		verdict FAIL "pagemap_bench/$k" "missing figure (patched '$p', unpatched '$u')"
		continue
	fi
	r=$(awk -v p="$p" -v u="$u" 'BEGIN {printf "%.2f", p / u}')
	if awk -v r="$r" 'BEGIN {exit !(r <= 1.2)}'; then
		verdict PASS "pagemap_bench/$k" "patched $p ms, unpatched $u ms, ratio ${r}x (limit 1.2x)"
	else
		verdict FAIL "pagemap_bench/$k" "patched $p ms, unpatched $u ms, ratio ${r}x (limit 1.2x)"
	fi
done
[ $fail = 0 ] && echo "vmtest: all checks passed" || echo "vmtest: FAILED"
exit $fail
