#!/usr/bin/env bash
# A destination that floods the source with page requests and never reads
# the answers (200000 requests for a 4 KiB page: 800 MiB of answers): the
# source must not buffer them all, and must keep answering its control
# socket. conn.c stops handling a connection's frames past 32 MiB of unsent
# output. (In this scenario the source also stalls earlier on its own,
# near 3 MiB of answers, with or without that limit: the test bounds what
# is buffered, it does not single out the limit.)
. "$SRC/tests/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing (for the hostile peer)"
start_daemon src
start_workload WS source --size 16M --threads 1
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500001000000)
# Both parts of the daemon: the engine reads the frames.
rss_kb() { local p; for p in $(daemon_pids src); do cat "/proc/$p/status"; done | awk '/^VmRSS/ {n += $2} END {print n}'; }
before=$(rss_kb)

tls=()
[ "${UFFDD_TEST_INSECURE:-0}" = 1 ] || tls=("$PKI/ca.crt" "$PKI/node.crt" "$PKI/node.key")
mkfifo "$T/hold"
python3 "$SRC/tests/flood-peer.py" 127.0.0.1 "$src_PORT" "$ID" 200000 "${tls[@]}" \
	<"$T/hold" >"$T/flood.out" 2>"$T/flood.log" &
PIDS+=($!)
exec {hold}>"$T/hold"
for _ in $(seq 1200); do
	grep -q sent "$T/flood.out" && break
	kill -0 "${PIDS[-1]}" 2>/dev/null || fail "flood peer died: $(cat "$T/flood.log")"
	sleep 0.05
done
grep -q sent "$T/flood.out" || fail "flood peer never finished sending"
# Answers sent so far: the source counts each request it answered. It must
# stop near 32 MiB of answers (8192) plus what the sockets hold. Watch for
# 3 s; a slow machine could only make a bad daemon pass, never fail a
# good one.
faults() {
	"$CLIENT" --control "$src_SOCK" status "$ID" --json |
		grep -o '"demand_faults": *[0-9]*' | grep -o '[0-9]*$'
}
max=0 maxrss=0
for _ in $(seq 60); do
	n=$(faults) || fail "source does not answer status during the flood"
	r=$(rss_kb)
	[ "$n" -gt "$max" ] && max=$n
	[ "$r" -gt "$maxrss" ] && maxrss=$r
	sleep 0.05
done
info "source answered at most $max requests; RSS ${before} kB before, at most ${maxrss} kB during"
[ "$max" -lt 30000 ] || fail "source answered $max requests of a peer that reads nothing"
# 32 MiB of output, 4 MiB of unread input, libevent and TLS buffers.
[ $((maxrss - before)) -lt $((128 * 1024)) ] ||
	fail "source buffered $(((maxrss - before) / 1024)) MiB for a peer that does not read"
exec {hold}>&-
wait "${PIDS[-1]}" 2>/dev/null || true
kill -0 "$src_PID" || fail "source died"
