#!/usr/bin/env bash
# uffdd --metrics serves OpenMetrics a real Prometheus scrapes: a server
# (Debian's prometheus, tests/setup.sh installs it) scrapes both daemons
# every second over a migration with faults, and its HTTP API then says
# the fault histograms counted what status says of the migration, on each
# side. promtool checks the endpoint's text; uffd-client metrics prints
# the same counts from the control socket. The endpoint answers GET
# /metrics only (404, 405), ends a request too large or too slow, and a
# crowd of idle connections does not stop it serving.
. "$SRC/tests/lib.sh"
need_root
for t in prometheus promtool curl python3; do
	command -v "$t" >/dev/null || skip "$t missing (tests/setup.sh installs Debian's prometheus)"
done
SM=$(free_port)
DM=$(free_port)
start_daemon src --metrics "$SM"
start_daemon dst --metrics "127.0.0.1:$DM"
grep -q "metrics on http://127.0.0.1:$SM/metrics" "$T/src.log" ||
	fail "a port alone is not loopback: $(grep metrics "$T/src.log")"

# The endpoint, by hand first.
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code "http://127.0.0.1:$SM/metrics")" = 200 ] || fail "GET /metrics: not 200"
[ "$(code "http://127.0.0.1:$SM/")" = 404 ] || fail "GET /: not 404"
[ "$(code "http://127.0.0.1:$SM/metricsx")" = 404 ] || fail "GET /metricsx: not 404"
[ "$(code -X POST "http://127.0.0.1:$SM/metrics")" = 405 ] || fail "POST /metrics: not 405"
curl -s -D "$T/h" -o /dev/null -H 'Accept: application/openmetrics-text; version=1.0.0' \
	"http://127.0.0.1:$SM/metrics"
grep -qi '^content-type: application/openmetrics-text' "$T/h" || fail "no OpenMetrics when asked: $(cat "$T/h")"
curl -s -H 'Accept: application/openmetrics-text; version=1.0.0' "http://127.0.0.1:$SM/metrics" |
	tail -n 1 | grep -qx '# EOF' || fail "OpenMetrics text does not end with # EOF"
python3 - "$SM" <<'PY' || fail "the endpoint mishandles bad clients"
import socket, sys, time
port = int(sys.argv[1])
def conn():
    return socket.create_connection(("127.0.0.1", port), timeout=10)
# A request line longer than the limit: refused, not buffered.
s = conn()
s.sendall(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n")
r = s.recv(100)
assert r.startswith(b"HTTP/1.1 431") or r == b"", r
# Garbage: 400.
s = conn()
s.sendall(b"hello\r\n\r\n")
assert s.recv(100).startswith(b"HTTP/1.1 400")
# Twenty idle connections: at most 16 are kept, and once they time out
# (5 s) or close, the endpoint serves again.
idle = [conn() for _ in range(20)]
t0 = time.time()
for s in idle[:16]:
    assert s.recv(10) == b"", "an idle connection got an answer"
assert time.time() - t0 < 9, "idle connections were not timed out"
s = conn()
s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
assert s.recv(20).startswith(b"HTTP/1.1 200")
PY
info "GET /metrics 200, other paths 404, POST 405, too large 431, garbage 400, idle ones closed"

# Refused control requests are counted, those the privileged part refuses
# (a process no one may migrate) too.
refusals() {
	"$CLIENT" --control "$src_SOCK" metrics |
		sed -n 's/^uffdd_control_refusals_total{reason="invalid"} //p'
}
before=$(refusals)
"$CLIENT" --control "$src_SOCK" export 1 >/dev/null 2>&1 && fail "export 1 accepted"
for _ in $(seq 50); do
	[ "$(refusals)" -gt "$before" ] && break
	sleep 0.1
done
[ "$(refusals)" = $((before + 1)) ] || fail "refusals: $before, then $(refusals)"
info "a refused request is counted"

# promtool on the endpoint's text.
curl -s "http://127.0.0.1:$DM/metrics" >"$T/metrics.txt"
promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1 ||
	fail "promtool check metrics: $(cat "$T/promtool.out")"
info "promtool check metrics passes"

# Prometheus on loopback, scraping both daemons every second.
PP=$(free_port)
cat >"$T/prometheus.yml" <<EOF2
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: uffdd
    static_configs:
      - targets: ['127.0.0.1:$SM', '127.0.0.1:$DM']
EOF2
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
	--web.listen-address="127.0.0.1:$PP" >"$T/prometheus.out" 2>&1 &
PIDS+=($!)
API=http://127.0.0.1:$PP/api/v1
# q QUERY: the first value of an instant query, or nothing.
q() {
	curl -s -G "$API/query" --data-urlencode "query=$1" |
		python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null
}
for _ in $(seq 150); do
	[ "$(q "sum(up{job=\"uffdd\"})")" = 2 ] && break
	sleep 0.2
done
[ "$(q "sum(up{job=\"uffdd\"})")" = 2 ] ||
	fail "prometheus does not scrape both: $(curl -s "$API/targets") $(tail -n 5 "$T/prometheus.out")"
info "prometheus scrapes both daemons"

# A migration with demand faults. A source's counts go into a histogram
# of its own role.
paced_migration src dst 16M 0x500000000000
paced_finish dst
json() { "$CLIENT" --control "$1" status "$ID" --json; }
SF=$(json "$src_SOCK" | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d["demand_faults"])')
DF=$(json "$dst_SOCK" | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d["demand_faults"])')
[ "$DF" -gt 0 ] || fail "the migration had no demand faults"
# fault_count ROLE PORT: the histogram's count Prometheus holds.
fault_count() {
	q "uffdd_demand_fault_latency_seconds_count{role=\"$1\",instance=\"127.0.0.1:$2\"}"
}
for _ in $(seq 50); do
	[ "$(fault_count destination "$DM")" = "$DF" ] && [ "$(fault_count source "$SM")" = "$SF" ] && break
	sleep 0.2
done
[ "$(fault_count destination "$DM")" = "$DF" ] ||
	fail "destination: Prometheus counts $(fault_count destination "$DM") faults, status $DF"
[ "$(fault_count source "$SM")" = "$SF" ] ||
	fail "source: Prometheus counts $(fault_count source "$SM") requests, status $SF"
info "fault histogram counts equal status: destination $DF, source $SF"
for _ in $(seq 50); do
	[ "$(q "uffdd_migrations_ended_total{role=\"destination\",state=\"complete\",instance=\"127.0.0.1:$DM\"}")" = 1 ] &&
		[ "$(q "uffdd_residency_seconds_count{instance=\"127.0.0.1:$DM\"}")" = 1 ] && break
	sleep 0.2
done
[ "$(q "uffdd_migrations_ended_total{role=\"destination\",state=\"complete\",instance=\"127.0.0.1:$DM\"}")" = 1 ] ||
	fail "no completed migration in Prometheus"
[ "$(q "uffdd_residency_seconds_count{instance=\"127.0.0.1:$DM\"}")" = 1 ] || fail "no residency sample"
# Both lanes' handshakes, on each side, unless the lanes are plaintext.
if [ "${UFFDD_TEST_INSECURE:-0}" != 1 ]; then
	for port in "$SM" "$DM"; do
		n=$(q "uffdd_tls_handshakes_total{instance=\"127.0.0.1:$port\"}")
		[ "${n:-0}" -ge 2 ] || fail "TLS handshakes at :$port: ${n:-none}, want 2 or more"
	done
fi
p99=$(q "histogram_quantile(0.99, uffdd_demand_fault_latency_seconds_bucket{role=\"destination\",instance=\"127.0.0.1:$DM\"})")
info "destination fault latency p99 from Prometheus: ${p99:-none} s"

# The same counts from the control socket.
"$CLIENT" --control "$dst_SOCK" metrics >"$T/client.txt"
tail -n 1 "$T/client.txt" | grep -qx '# EOF' || fail "uffd-client metrics: no # EOF"
grep -qx "uffdd_demand_fault_latency_seconds_count{role=\"destination\"} $DF" "$T/client.txt" ||
	fail "uffd-client metrics: $(grep fault_latency_seconds_count "$T/client.txt")"
info "uffd-client metrics says the same"

# Pages by lane and kind add up to what status says moved on each lane,
# and only data pages carry bytes.
lane_sum() {
	sed -n "s/^uffdd_pages_total{role=\"destination\",lane=\"$1\",kind=\"[a-z]*\"} //p" "$T/client.txt" |
		awk '{s += $1} END {print s + 0}'
}
field() {
	json "$dst_SOCK" | python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d['$1'])"
}
DP=$(field demand_pages)
BP=$(field prefetched_pages)
[ "$(lane_sum demand)" = "$DP" ] || fail "demand lane: metrics $(lane_sum demand) pages, status $DP"
[ "$(lane_sum bulk)" = "$BP" ] || fail "bulk lane: metrics $(lane_sum bulk) pages, status $BP"
data=$(sed -n 's/^uffdd_pages_total{role="destination",lane="\([a-z]*\)",kind="data"} //p' "$T/client.txt" | awk '{s += $1} END {print s + 0}')
bytes=$(sed -n 's/^uffdd_bytes_total{role="destination",lane="[a-z]*"} //p' "$T/client.txt" | awk '{s += $1} END {print s + 0}')
[ "$data" -gt 0 ] && [ "$bytes" = $((data * 4096)) ] ||
	fail "destination: $data data pages but $bytes bytes"
info "pages by lane and kind: demand $DP, bulk $BP (status the same); $data data pages, $bytes bytes"
