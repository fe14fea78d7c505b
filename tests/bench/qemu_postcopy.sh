#!/usr/bin/env bash
# Benchmark: the same TCG guest (memcheck re-verifying 256 MiB) migrated
# between two QEMUs on this host, in one run, by QEMU's own postcopy
# (postcopy-ram, guest RAM private anonymous) and by uffdd
# (uffd-client migrate-qemu, guest RAM in shared files). For each:
#   resident  time from switchover to every page resident on the destination
#   stall     the guest's longest stall on the destination (memcheck's
#             longest gap between two pages, by the guest's clock)
#   bytes     total bytes moved (QEMU's ram.transferred; for uffdd the
#             daemon's bytes plus QEMU's device-state stream)
#   downtime  source vCPUs stopped until the destination's run (QEMU's own
#             "downtime"; migrate-qemu's measure for uffdd)
# QEMU's times come from polling query-migrate (about 10 ms resolution).
# Usage (root): BUILDDIR=_build tests/bench/qemu_postcopy.sh
SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export SRC
. "$SRC/tests/lib.sh"
need_root
. "$SRC/tests/e2e/qemu-lib.sh"
command -v python3 >/dev/null || skip "python3 missing"

now() { date +%s.%N; }
# jget JSON KEY.KEY...: a member of a JSON document, "" when absent.
jget() {
	python3 -c 'import json,sys
v=json.loads(sys.argv[1])
for k in sys.argv[2].split("."):
    v=v.get(k,"") if isinstance(v,dict) else ""
print(v)' "$1" "$2"
}
# max_stall NAME: the longest per-pass stall memcheck reported on NAME.
max_stall() {
	sed -n 's/.*pass-stall-ms \([0-9]*\).*/\1/p' "$T/$1.serial" | sort -n | tail -n1
}

RESULTS=()

bench_qemu_postcopy() {
	local port t_sw="" t_done="" s d info bytes down
	QEMU_RAM=anon qemu qa
	runs_on qa 2
	QEMU_RAM=anon qemu qb -incoming defer
	for n in qa qb; do
		qmp $n migrate-set-capabilities \
			'{"capabilities":[{"capability":"postcopy-ram","state":true}]}' >/dev/null
	done
	# No precopy bandwidth cap: postcopy starts after the first pass anyway.
	qmp qa migrate-set-parameters '{"max-bandwidth":107374182400}' >/dev/null
	port=$(free_port)
	qmp qb migrate-incoming "{\"uri\":\"tcp:127.0.0.1:$port\"}" >/dev/null
	qmp qa migrate "{\"uri\":\"tcp:127.0.0.1:$port\"}" >/dev/null
	qmp qa migrate-start-postcopy >/dev/null
	for _ in $(seq 3000); do
		if [ -z "$t_sw" ]; then
			s=$(jget "$(qmp qa query-migrate)" status)
			case $s in postcopy-active | completed) t_sw=$(now) ;; failed) fail "QEMU postcopy failed" ;; esac
		fi
		if [ -n "$t_sw" ]; then
			d=$(jget "$(qmp qb query-migrate)" status)
			[ "$d" = completed ] && t_done=$(now) && break
			[ "$d" = failed ] && fail "QEMU postcopy failed on the destination"
		fi
		sleep 0.005
	done
	[ -n "$t_done" ] || fail "QEMU postcopy did not complete"
	info=$(qmp qa query-migrate)
	bytes=$(jget "$info" ram.transferred)
	down=$(jget "$info" downtime)
	runs_on qb 3
	qmp qa quit >/dev/null 2>&1 || true
	gone "${QPID[qa]}"
	RESULTS+=("$(printf '%-22s %10.3f s %8s ms %10.1f MiB %8s ms' "QEMU postcopy-ram" \
		"$(echo "$t_done - $t_sw" | bc)" "$(max_stall qb)" "$(echo "$bytes / 1048576" | bc -l)" "$down")")
	kill "${QPID[qb]}" 2>/dev/null || true
}

bench_uffdd() {
	local out id res ubytes qbytes down
	start_daemon src
	start_daemon dst
	qemu ua
	runs_on ua 2
	qemu ub -incoming defer
	"$CLIENT" migrate-qemu --src-qmp "$T/ua.qmp" --dst-qmp "$T/ub.qmp" \
		--src-control "$src_SOCK" --dst-control "$dst_SOCK" \
		--src-peer "$src_ADDR:$src_PORT" --timeout 300 >"$T/uffdd.out" 2>&1 ||
		fail "migrate-qemu: $(cat "$T/uffdd.out")"
	out=$(cat "$T/uffdd.out")
	id=$(sed -n 's/.*RAM exported: migration \([0-9a-f]*\).*/\1/p' <<<"$out")
	res=$(sed -n 's/.*every page resident \([0-9.]*\) s after.*/\1/p' <<<"$out")
	qbytes=$(sed -n 's/.*: \([0-9]*\) bytes by QEMU.*/\1/p' <<<"$out")
	down=$(sed -n 's/.*guest running, \([0-9]*\) ms after.*/\1/p' <<<"$out")
	ubytes=$(jget "$("$CLIENT" --control "$dst_SOCK" status "$id" --json)" bytes)
	runs_on ub 3
	gone "${QPID[ua]}"
	RESULTS+=("$(printf '%-22s %10.3f s %8s ms %10.1f MiB %8s ms' "uffdd (migrate-qemu)" \
		"$res" "$(max_stall ub)" "$(echo "($ubytes + $qbytes) / 1048576" | bc -l)" "$down")")
	kill "${QPID[ub]}" 2>/dev/null || true
}

info "QEMU's own postcopy"
bench_qemu_postcopy
info "uffdd"
bench_uffdd
echo
printf '%-22s %12s %11s %14s %11s\n' "512 MiB TCG guest" "resident" "stall" "bytes moved" "downtime"
for r in "${RESULTS[@]}"; do echo "$r"; done
