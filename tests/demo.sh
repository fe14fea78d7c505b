#!/usr/bin/env bash
# The demo: two uffdd daemons on loopback migrate 1 GiB of a running process
# post-copy. Shows the export, the attach, progress, the statistics and the
# byte-for-byte verification.
BUILDDIR=$(cd "${1:-_build}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
export BUILDDIR SRC
. "$SRC/tests/lib.sh"
need_root
SIZE=${DEMO_SIZE:-1G}
base=0x500000000000
end=$(printf '0x%x' $((base + $(numfmt --from=iec "$SIZE"))))
RANGE=$(printf '%x-%x' $((base)) $((end)))

# tests/lib.sh makes a throwaway CA with the openssl CLI: the daemons talk
# TLS 1.3 with mutual authentication, as between two hosts.
info "starting two daemons on loopback (source and destination host), TLS 1.3"
start_daemon src
start_daemon dst
# At the priority the systemd unit gives them (Nice=).
as_unit src dst
echo "   source uffdd on 127.0.0.1:$src_PORT, destination uffdd on 127.0.0.1:$dst_PORT (nice $(unit_nice))"

info "source: a process fills $SIZE with a pattern and keeps changing it"
start_workload WS source --size "$SIZE" --threads 2
info "destination: a process with the same layout, memory empty"
start_workload WD dest --size "$SIZE" --threads 8

info "uffd-client export $WS"
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
echo "   migration ID $ID; source process frozen (state $(proc_state "$WS"))"
src_hash H_SRC "$WS" "$base" "$end"
echo "   SHA-256 of the frozen source memory (its $SRC_PRESENT present pages): $H_SRC"

info "uffd-client attach $WD --from 127.0.0.1:$src_PORT"
"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE" | sed 's/^/   /'
info "destination runs now: 8 threads touch and check every page"
kill -USR1 "$WD"
"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 600
wait_verified WD | sed 's/^/   destination workload: /'
H_DST=$(dst_hash H_SRC "$WD" "$base" "$end")
echo "   SHA-256 of the destination memory:   $H_DST"
info "source daemon's view"
"$CLIENT" --control "$src_SOCK" status "$ID"
if [ "$H_SRC" = "$H_DST" ]; then
	info "VERIFIED: destination memory equals the frozen source, byte for byte"
else
	fail "destination memory differs from the source"
fi
