#!/usr/bin/env bash
# Benchmark: the same TCG guest (memcheck re-verifying 256 MiB) migrated
# by QEMU's own postcopy (postcopy-ram, guest RAM private anonymous) and
# by uffdd (guest RAM in shared files), in two placements:
#   one    two QEMUs on this host, one run each (uffd-client migrate-qemu)
#   hosts  two "hosts": network namespaces joined by a veth (make_hosts),
#          uffdd by migrate-qemu send (source) and receive (destination);
#          QEMU plaintext and with TLS, uffdd with TLS (the daemon refuses
#          plaintext peers off loopback), RUNS alternated runs each
#          (default 3), medians shown; beside them the floor: QEMU
#          moving device state alone (x-ignore-shared, both QEMUs on one
#          RAM file), the least any switchover of this kind takes here
# Usage (root): BUILDDIR=_build tests/bench/qemu_postcopy.sh [one|hosts|all]
# (default all). For each:
#   resident  time from switchover to every page resident on the destination
#   stall     the guest's longest stall on the destination (memcheck's
#             longest gap between two pages, by the guest's clock)
#   bytes     total bytes moved (QEMU's ram.transferred; for uffdd the
#             daemon's bytes plus QEMU's device-state stream)
#   downtime  one: source vCPUs stopped until the destination's run (QEMU's
#             own "downtime"; migrate-qemu's measure for uffdd); hosts: the
#             source QEMU's STOP event to the destination's RESUME event
#             (QMP event timestamps, one clock for both), for both systems
# One host: QEMU's times come from polling query-migrate (about 10 ms
# resolution). Two hosts: QEMU's resident time is the destination's
# RESUME event to its MIGRATION "completed" event; uffdd's is receive's
# own measure (the destination running to every page resident).
# Below the hosts table: each uffdd daemon's CPU seconds over the run
# (both its parts), and issue 37's targets from the medians: uffdd with
# TLS stalls the guest no longer and is resident no later than QEMU's
# postcopy plain, and its downtime is at most the floor's + 3 ms.
# uffdd's daemons run at the unit's nice value, as the service runs them
# (BENCH_NICE overrides); the QEMUs, and QEMU's own postcopy, at 0.
# BENCH_ARGS go to both daemons of the hosts table, BENCH_DST_ARGS to its
# destination's (A/B runs of an option, as in run.sh).
# The row uffdd-precopy is send --precopy (pre-copy, then post-copy for
# what the guest wrote last), checked against uffdd-tls (post-copy alone):
# its post-copy faults at most a tenth, its downtime the floor's + 3 ms.
# HOSTS_ROWS="floor qemu-plain qemu-tls uffdd-tls uffdd-precopy" (the
# default) picks the hosts rows to run, for a quicker look at some.
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
# daemon_cpu NAME: user+system CPU seconds so far of daemon NAME, both
# its parts (the privileged part and the engine).
daemon_cpu() { cpu_s "$(eval echo "\$${1}_PID")"; }
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
	bench_nice src dst
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

# --- Two hosts ------------------------------------------------------------

# events NAME: QMP events of QEMU NAME (its second monitor, $T/NAME-ev.qmp)
# are written to $T/NAME.events, one a line: "SECONDS.USEC EVENT DATA".
# Returns once the monitor listens.
events() {
	python3 - "$T/$1-ev.qmp" "$T/$1.events" <<-'EOF' &
		import json, socket, sys, time
		s = socket.socket(socket.AF_UNIX)
		for _ in range(200):
		    try:
		        s.connect(sys.argv[1])
		        break
		    except OSError:
		        time.sleep(0.05)
		f = s.makefile("rb")
		o = open(sys.argv[2], "a", buffering=1)
		f.readline()
		s.sendall(b'{"execute":"qmp_capabilities"}\n')
		for line in f:
		    m = json.loads(line)
		    if "return" in m:
		        o.write("ready\n")
		    elif "event" in m:
		        t = m["timestamp"]
		        o.write("%d.%06d %s %s\n" % (t["seconds"], t["microseconds"], m["event"],
		                json.dumps(m.get("data", {}), separators=(",", ":"))))
	EOF
	PIDS+=($!)
	for _ in $(seq 100); do
		grep -q '^ready' "$T/$1.events" 2>/dev/null && return
		sleep 0.05
	done
	fail "no QMP events from $1"
}
# event_ts NAME EVENT [DATA]: the time of NAME's first EVENT (whose data
# holds DATA), waiting up to 10 s for it; "" when none came.
event_ts() {
	local line
	for _ in $(seq 200); do
		line=$(grep -m1 "^[0-9.]* $2 .*${3:-}" "$T/$1.events" 2>/dev/null) && break
		sleep 0.05
	done
	echo "${line%% *}"
}
# hqemu NAME NETNS [ARGS...]: a QEMU on one of the hosts, its events
# recorded.
hqemu() {
	local name=$1 ns=$2
	shift 2
	QEMU_NS=$ns qemu "$name" -qmp "unix:$T/$name-ev.qmp,server=on,wait=off" "$@"
	events "$name"
}
# retire NAME...: the QEMUs are gone, their RAM files too.
retire() {
	local n
	for n in "$@"; do
		kill "${QPID[$n]}" 2>/dev/null || true
		gone "${QPID[$n]}"
		rm -f "$SHM-$n"
	done
}
ms_between() { echo "($2 - $1) * 1000" | bc -l; }
# record KEY DOWNTIME_MS RESIDENT_S STALL_MS BYTES SENT_MS: one run's
# numbers (SENT_MS: the source's stop until its device state was written,
# QEMU's own "downtime" measure).
declare -A VAL=()
record() {
	VAL[$1.down]+="$(printf '%.1f' "$2") "
	VAL[$1.res]+="$(printf '%.3f' "$3") "
	VAL[$1.stall]+="$4 "
	VAL[$1.mib]+="$(printf '%.1f' "$(echo "$5 / 1048576" | bc -l)") "
	VAL[$1.sent]+="$(printf '%.1f' "$6") "
}
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "nan"}'; }

# The certificates QEMU's tls-creds-x509 wants, in one directory (QTLS),
# signed by the daemons' CA; QEMU refuses a leaf certificate whose key
# usage lacks keyEncipherment.
qemu_pki() {
	default_pki
	cat >>"$PKI/ca.cnf" <<-EOF
		[qleaf]
		basicConstraints = CA:FALSE
		keyUsage = digitalSignature, keyEncipherment
		extendedKeyUsage = serverAuth, clientAuth
		subjectAltName = \${ENV::SAN}
	EOF
	issue ca qemu "IP:$SRC_HOST_ADDR,IP:$DST_HOST_ADDR" -extensions qleaf
	QTLS=$PKI/qemu-tls
	mkdir -p "$QTLS"
	cp "$PKI/ca.crt" "$QTLS/ca-cert.pem"
	for e in server client; do
		cp "$PKI/qemu.crt" "$QTLS/$e-cert.pem"
		cp "$PKI/qemu.key" "$QTLS/$e-key.pem"
	done
}

# hosts_qemu MODE RUN: QEMU's postcopy-ram from the source host to the
# destination host, MODE plain or tls.
hosts_qemu() {
	local mode=$1 a=qs$1$2 b=qd$1$2 port srcobj=() dstobj=() t_stop t_run t_done info n
	if [ "$mode" = tls ]; then
		srcobj=(-object "tls-creds-x509,id=tls0,dir=$QTLS,endpoint=client")
		dstobj=(-object "tls-creds-x509,id=tls0,dir=$QTLS,endpoint=server")
	fi
	QEMU_RAM=anon hqemu "$a" "$NS_SRC" "${srcobj[@]}"
	runs_on "$a" 2
	QEMU_RAM=anon hqemu "$b" "$NS_DST" -incoming defer "${dstobj[@]}"
	for n in "$a" "$b"; do
		qmp "$n" migrate-set-capabilities \
			'{"capabilities":[{"capability":"postcopy-ram","state":true},{"capability":"events","state":true}]}' >/dev/null
		[ "$mode" = plain ] || qmp "$n" migrate-set-parameters '{"tls-creds":"tls0"}' >/dev/null
	done
	# No precopy bandwidth cap: postcopy starts after the first pass anyway.
	qmp "$a" migrate-set-parameters '{"max-bandwidth":107374182400}' >/dev/null
	port=$((20000 + RANDOM % 12000))
	qmp "$b" migrate-incoming "{\"uri\":\"tcp:$DST_HOST_ADDR:$port\"}" >/dev/null
	qmp "$a" migrate "{\"uri\":\"tcp:$DST_HOST_ADDR:$port\"}" >/dev/null
	qmp "$a" migrate-start-postcopy >/dev/null
	for _ in $(seq 6000); do
		grep -q ' MIGRATION .*"completed"' "$T/$b.events" && break
		grep -q ' MIGRATION .*"failed"' "$T/$a.events" "$T/$b.events" &&
			fail "QEMU postcopy ($mode) failed: $(qmp "$a" query-migrate)"
		sleep 0.05
	done
	t_stop=$(event_ts "$a" STOP)
	t_run=$(event_ts "$b" RESUME)
	t_done=$(event_ts "$b" MIGRATION '"completed"')
	if [ -z "$t_stop" ] || [ -z "$t_run" ] || [ -z "$t_done" ]; then
		fail "QEMU postcopy ($mode): STOP '$t_stop' RESUME '$t_run' completed '$t_done'"
	fi
	info=$(qmp "$a" query-migrate)
	runs_on "$b" 3
	record "qemu-$mode" "$(ms_between "$t_stop" "$t_run")" "$(echo "$t_done - $t_run" | bc -l)" \
		"$(max_stall "$b")" "$(jget "$info" ram.transferred)" "$(jget "$info" downtime)"
	info "QEMU $mode run $2: downtime $(ms_between "$t_stop" "$t_run" | cut -c1-6) ms (QEMU's own: $(jget "$info" downtime) ms)"
	qmp "$a" quit >/dev/null 2>&1 || true
	retire "$a" "$b"
}

# hosts_floor RUN: the floor of any switchover that moves device state
# alone: both QEMUs map the same RAM file (possible only because the two
# "hosts" share a file system) and QEMU migrates with x-ignore-shared,
# nothing else. Its STOP to RESUME is what QEMU's device state, its
# stream and the destination's load and start cost on this machine.
hosts_floor() {
	local a=fs$1 b=fd$1 port n t_stop t_run info
	RAM_FILE=$SHM-floor$1 hqemu "$a" "$NS_SRC"
	runs_on "$a" 2
	RAM_FILE=$SHM-floor$1 hqemu "$b" "$NS_DST" -incoming defer
	for n in "$a" "$b"; do
		qmp "$n" migrate-set-capabilities \
			'{"capabilities":[{"capability":"x-ignore-shared","state":true},{"capability":"events","state":true}]}' >/dev/null
	done
	port=$((20000 + RANDOM % 12000))
	qmp "$b" migrate-incoming "{\"uri\":\"tcp:$DST_HOST_ADDR:$port\"}" >/dev/null
	qmp "$a" migrate "{\"uri\":\"tcp:$DST_HOST_ADDR:$port\"}" >/dev/null
	t_stop=$(event_ts "$a" STOP)
	t_run=$(event_ts "$b" RESUME)
	[ -n "$t_stop" ] && [ -n "$t_run" ] || fail "floor: STOP '$t_stop' RESUME '$t_run': $(qmp "$a" query-migrate)"
	info=$(qmp "$a" query-migrate)
	runs_on "$b" 3
	record floor "$(ms_between "$t_stop" "$t_run")" 0 "$(max_stall "$b")" "$(jget "$info" ram.transferred)" \
		"$(ms_between "$t_stop" "$(event_ts "$a" MIGRATION '"completed"')")"
	info "floor run $1: downtime $(ms_between "$t_stop" "$t_run" | cut -c1-6) ms (QEMU's own: $(jget "$info" downtime) ms)"
	qmp "$a" quit >/dev/null 2>&1 || true
	retire "$a" "$b"
	rm -f "$SHM-floor$1"
}

# hosts_uffdd MODE RUN [KEY SENDARGS...]: migrate-qemu receive on the
# destination host, then send on the source host under the same ID, with
# the daemons of MODE; recorded as KEY (uffdd-MODE).
hosts_uffdd() {
	local mode=$1 run=$2 key=${3:-uffdd-$1} s=srct d=dstt port id rp t_stop t_run qbytes ubytes res
	local sc0 dc0 st a b
	a=us${key#uffdd-}$run b=ud${key#uffdd-}$run
	shift $(($# < 3 ? $# : 3))
	hqemu "$a" "$NS_SRC"
	runs_on "$a" 2
	hqemu "$b" "$NS_DST" -incoming defer
	port=$((20000 + RANDOM % 12000))
	id=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	ip netns exec "$NS_DST" "$CLIENT" --control "$(eval echo "\$${d}_SOCK")" migrate-qemu receive \
		--qmp "$T/$b.qmp" --id "$id" --from "$SRC_HOST_ADDR:$(eval echo "\$${s}_PORT")" \
		--incoming "$DST_HOST_ADDR:$port" --timeout 300 >"$T/$b.recv" 2>&1 &
	rp=$!
	sc0=$(daemon_cpu "$s")
	dc0=$(daemon_cpu "$d")
	ip netns exec "$NS_SRC" "$CLIENT" --control "$(eval echo "\$${s}_SOCK")" migrate-qemu send \
		--qmp "$T/$a.qmp" --id "$id" --to "$DST_HOST_ADDR:$port" --timeout 300 "$@" \
		>"$T/$a.send" 2>&1 || fail "send ($key): $(cat "$T/$a.send")"
	wait "$rp" || fail "receive ($mode): $(cat "$T/$b.recv")"
	t_stop=$(event_ts "$a" STOP)
	t_run=$(event_ts "$b" RESUME)
	if [ -z "$t_stop" ] || [ -z "$t_run" ]; then
		fail "uffdd ($mode): STOP '$t_stop' RESUME '$t_run'"
	fi
	res=$(sed -n 's/.*every page resident \([0-9.]*\) s after.*/\1/p' "$T/$b.recv")
	qbytes=$(sed -n 's/.*: \([0-9]*\) bytes by QEMU.*/\1/p' "$T/$a.send")
	st=$("$CLIENT" --control "$(eval echo "\$${d}_SOCK")" status "$id" --json)
	ubytes=$(jget "$st" bytes)
	VAL[$key.faults]+="$(jget "$st" demand_faults) "
	runs_on "$b" 3
	VAL[$key.scpu]+="$(echo "$(daemon_cpu "$s") - $sc0" | bc -l | xargs printf '%.3f') "
	VAL[$key.dcpu]+="$(echo "$(daemon_cpu "$d") - $dc0" | bc -l | xargs printf '%.3f') "
	record "$key" "$(ms_between "$t_stop" "$t_run")" "$res" "$(max_stall "$b")" "$((ubytes + qbytes))" \
		"$(ms_between "$t_stop" "$(event_ts "$a" MIGRATION '"completed"')")"
	info "$key run $run: downtime $(ms_between "$t_stop" "$t_run" | cut -c1-6) ms; send: $(sed -n 's/.*migrate-qemu: source vCPUs stopped; go:.* \([0-9.]*\) ms in the daemon.*/go: \1 ms/p' "$T/$a.send"), $(sed -n 's/.*migrate-qemu: device state sent to [^:]*:[0-9]*: \(.*\)/\1/p' "$T/$a.send"); receive: $(sed -n 's/^ *demand *//p' "$T/$b.recv")"
	retire "$a" "$b"
}

# row NAME: whether HOSTS_ROWS asks for the hosts row NAME.
row() { [[ " ${HOSTS_ROWS:-floor qemu-plain qemu-tls uffdd-tls uffdd-precopy} " == *" $1 "* ]]; }

bench_hosts() {
	local runs=${RUNS:-3} k l i mode
	make_hosts
	start_daemon srct ${BENCH_ARGS:-}
	start_daemon dstt ${BENCH_DST_ARGS:-} ${BENCH_ARGS:-}
	bench_nice srct dstt
	qemu_pki
	for i in $(seq "$runs"); do
		if row floor; then
			info "two hosts, run $i: the floor (device state alone)"
			hosts_floor "$i"
		fi
		for mode in plain tls; do
			if row "qemu-$mode"; then
				info "two hosts, $mode, run $i: QEMU's own postcopy"
				hosts_qemu "$mode" "$i"
			fi
			# uffdd refuses plaintext peers off loopback (--insecure
			# is for loopback only): TLS alone between the hosts.
			[ "$mode" = tls ] && row "uffdd-$mode" || continue
			info "two hosts, $mode, run $i: uffdd"
			hosts_uffdd "$mode" "$i"
		done
		if row uffdd-precopy; then
			info "two hosts, tls, run $i: uffdd, pre-copy"
			hosts_uffdd tls "$i" uffdd-precopy --precopy
		fi
	done
	echo
	echo "Two hosts (network namespaces over a veth), 512 MiB TCG guest, medians of $runs alternated runs"
	echo "downtime: source STOP to destination RESUME; sent: source STOP to its device state written"
	printf '%-28s %11s %9s %11s %9s %12s\n' "" "downtime" "sent" "resident" "stall" "bytes moved"
	for k in floor qemu-plain uffdd-plain qemu-tls uffdd-tls uffdd-precopy; do
		[ "$k" = uffdd-plain ] || row "$k" || continue
		case $k in
		floor) l="floor: shared RAM file" ;;
		qemu-plain) l="QEMU postcopy-ram, plain" ;;
		uffdd-plain)
			echo "uffdd send/receive, plain   (refused: uffdd's --insecure is for loopback only)"
			continue
			;;
		qemu-tls) l="QEMU postcopy-ram, TLS" ;;
		uffdd-tls) l="uffdd send/receive, TLS" ;;
		uffdd-precopy) l="uffdd send --precopy, TLS" ;;
		esac
		printf '%-28s %8s ms %6s ms %9s s %6s ms %8s MiB\n' "$l" \
			"$(median <<<"${VAL[$k.down]}")" "$(median <<<"${VAL[$k.sent]}")" \
			"$(median <<<"${VAL[$k.res]}")" \
			"$(median <<<"${VAL[$k.stall]}")" "$(median <<<"${VAL[$k.mib]}")"
		echo "    runs: downtime ms ${VAL[$k.down]}| sent ms ${VAL[$k.sent]}| resident s ${VAL[$k.res]}| stall ms ${VAL[$k.stall]}| MiB ${VAL[$k.mib]}"
		[ -n "${VAL[$k.faults]:-}" ] &&
			echo "    post-copy faults at the destination: $(median <<<"${VAL[$k.faults]}") (runs ${VAL[$k.faults]})"
		[ -n "${VAL[$k.scpu]:-}" ] &&
			echo "    daemons' CPU s: source $(median <<<"${VAL[$k.scpu]}") (runs ${VAL[$k.scpu]}), destination $(median <<<"${VAL[$k.dcpu]}") (runs ${VAL[$k.dcpu]})"
	done
	hosts_verdicts
}

# verdict NAME UFFDD LIMIT: pass when uffdd's median is at most the limit.
verdict() {
	printf '%-52s %9s %9s  %s\n' "$1" "$2" "$3" \
		"$(awk -v u="$2" -v l="$3" 'BEGIN {print (u == "nan" || l == "nan") ? "-" : (u <= l) ? "pass" : "MISS"}')"
}

# The targets (issue 37): uffdd with TLS against QEMU plain and the floor,
# medians of the same run.
hosts_verdicts() {
	local fl
	fl=$(median <<<"${VAL[floor.down]:-}")
	echo
	printf '%-52s %9s %9s  %s\n' target uffdd limit result
	verdict "longest guest stall (ms) <= QEMU postcopy plain's" \
		"$(median <<<"${VAL[uffdd-tls.stall]:-}")" "$(median <<<"${VAL[qemu-plain.stall]:-}")"
	verdict "resident (s) <= QEMU postcopy plain's" \
		"$(median <<<"${VAL[uffdd-tls.res]:-}")" "$(median <<<"${VAL[qemu-plain.res]:-}")"
	verdict "downtime (ms) <= the floor's + 3 ms" \
		"$(median <<<"${VAL[uffdd-tls.down]:-}")" "$(awk -v f="$fl" 'BEGIN {print (f == "nan") ? "nan" : f + 3}')"
	verdict "pre-copy: post-copy faults <= a tenth of post-copy's" \
		"$(median <<<"${VAL[uffdd-precopy.faults]:-}")" \
		"$(awk -v p="$(median <<<"${VAL[uffdd-tls.faults]:-}")" 'BEGIN {print (p == "nan") ? "nan" : p / 10}')"
	verdict "pre-copy: downtime (ms) <= the floor's + 3 ms" \
		"$(median <<<"${VAL[uffdd-precopy.down]:-}")" "$(awk -v f="$fl" 'BEGIN {print (f == "nan") ? "nan" : f + 3}')"
}

bench_one() {
	info "QEMU's own postcopy"
	bench_qemu_postcopy
	info "uffdd"
	bench_uffdd
	echo
	printf '%-22s %12s %11s %14s %11s\n' "512 MiB TCG guest" "resident" "stall" "bytes moved" "downtime"
	for r in "${RESULTS[@]}"; do echo "$r"; done
}

case ${1:-all} in
one) bench_one ;;
hosts) bench_hosts ;;
all)
	bench_one
	bench_hosts
	;;
*) fail "usage: qemu_postcopy.sh [one|hosts|all]" ;;
esac
