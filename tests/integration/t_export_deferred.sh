#!/usr/bin/env bash
# export --deferred --id (docs/qemu-two-hosts.md): a process that keeps
# writing is exported under an ID made here, deferred: it runs on, untouched,
# while its destination attaches and faults (the requests wait at the
# source). Then the process is stopped (kill -STOP, as QMP stop would),
# `go` takes its memory, and the destination ends byte for byte equal to
# the stopped source (memhash, --keep-source). go's latency is printed.
# Then the refusals: a bad or taken --id, go on an unknown ID, on an
# export that is not deferred, twice; --deferred with --precopy; cancel,
# which leaves the process as it was, as a daemon stopped before go does;
# go --prepare (the process stopped and checked ahead of go), which a
# cancel or the daemon's stop undoes; and an attach made before its
# export, its bulk stream held until its release (attach --hold-bulk,
# release), with release's refusals. That one goes prepared.
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
SIZE=32M
BASE=0x500000000000
END=$(printf '0x%x' $((BASE + $(numfmt --from=iec $SIZE))))
RANGE=$(printf '%x-%x' $((BASE)) $((END)))
key() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
new_id() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
src() { "$CLIENT" --control "$src_SOCK" "$@"; }
dst() { "$CLIENT" --control "$dst_SOCK" "$@"; }

start_workload WS source --size $SIZE --threads 2
start_workload WD dest --size $SIZE --threads 4 --prefault
ID=$(new_id)

# Refused before anything is exported: the process runs on.
expect_error "bad --id" "not a migration ID" src export "$WS" --deferred --id 12345
expect_error "--deferred with --image" "goes not with --image" \
	src export --image "$T/none.img" --deferred
expect_error "go on an unknown ID" "unknown migration ID" src go "$(new_id)"
expect_error "cancel on an unknown ID" "unknown migration ID" src cancel "$(new_id)"
expect_error "prepare on an unknown ID" "unknown migration ID" src go --prepare "$(new_id)"
[ "$(proc_state "$WS")" != T ] || fail "a refused export stopped the process"

got=$(src export "$WS" --range "$RANGE" --deferred --keep-source --id "$ID") ||
	fail "export --deferred failed"
[ "$got" = "$ID" ] || fail "export --id $ID printed $got"
src status "$ID" >"$T/st.out"
grep -q 'state *deferred' "$T/st.out" || fail "status: $(cat "$T/st.out")"
grep -q 'not attached yet' "$T/st.out" || fail "status: $(cat "$T/st.out")"
info "status before attach: $(grep deferred "$T/st.out" | tr -s ' ' | tr '\n' ';')"

# The ID is taken now, for any process; and GO is for deferred exports.
start_workload WX source --size 4M --threads 1 --base 0x600000000000
expect_error "taken --id" "has that ID already" src export "$WX" --id "$ID"
[ "$(proc_state "$WX")" != T ] || fail "a refused --id stopped the process"
PLAIN=$(src export "$WX" --keep-source)
expect_error "go on a non-deferred export" "not a deferred export" src go "$PLAIN"
kill -9 "$WX"

# The process runs and writes meanwhile, untouched by the export.
h1=$(mem_state "$WS" "$BASE" "$END")
sleep 0.3
h2=$(mem_state "$WS" "$BASE" "$END")
[ "$(proc_state "$WS")" != T ] || fail "a deferred export stopped the process"
[ "$h1" != "$h2" ] || fail "the process did not write while deferred"
info "the process writes on while deferred"

dst attach "$WD" --from "127.0.0.1:$src_PORT" --id "$ID" --range "$RANGE" \
	>"$T/attach.out" || fail "attach: $(cat "$T/attach.out")"
grep -q '^attached' "$T/attach.out" || fail "attach printed: $(cat "$T/attach.out")"
kill -USR1 "$WD" # its threads fault now; the requests wait at the source
for _ in $(seq 100); do
	src status "$ID" --json >"$T/st.json"
	[ "$(key "$T/st.json" attached)" = true ] && break
	sleep 0.05
done
[ "$(key "$T/st.json" attached)" = true ] || fail "never attached: $(cat "$T/st.json")"
[ "$(key "$T/st.json" state)" = '"deferred"' ] || fail "state: $(cat "$T/st.json")"
[ "$(key "$T/st.json" pages_present)" = 0 ] || fail "pages sent before go: $(cat "$T/st.json")"
# Longer than the destination's lane timeout (3 s): the pings keep the
# lanes up while the requests wait.
sleep 4
[ "$(proc_state "$WS")" != T ] || fail "attach stopped the process"
info "destination attached and faulting; nothing sent, the process runs"

kill -STOP "$WS"
for _ in $(seq 100); do
	[ "$(proc_state "$WS")" = T ] && break
	sleep 0.01
done
src_hash H_SRC "$WS" "$BASE" "$END"
src go "$ID" >"$T/go.out" || fail "go: $(cat "$T/go.out")"
info "go latency: $(cat "$T/go.out")"
grep -q ' [1-9][0-9]* queued' "$T/go.out" || fail "no request was queued before go"
expect_error "go twice" "had its go already" src go "$ID"
expect_error "cancel after go" "had its go already" src cancel "$ID"
expect_error "prepare after go" "had its go already" src go --prepare "$ID"

dst wait "$ID" --timeout 300 >"$T/wait.out" || fail "wait: $(cat "$T/wait.out")"
wait_verified WD
H_DST=$(dst_hash H_SRC "$WD" "$BASE" "$END")
info "source sha256 $H_SRC"
info "dest   sha256 $H_DST"
[ "$H_SRC" = "$H_DST" ] || fail "destination differs from the stopped source"
src wait "$ID" --timeout 60 >/dev/null 2>&1 || fail "source side did not complete"
[ "$(proc_state "$WS")" = T ] || fail "--keep-source: source not left stopped"

# cancel: a deferred export ends before its go; the process runs on.
start_workload WC source --size 4M --threads 1 --base 0x700000000000
CID=$(src export "$WC" --deferred)
src cancel "$CID" >/dev/null || fail "cancel failed"
src status "$CID" >"$T/st.out"
grep -q 'state *failed: cancelled before go' "$T/st.out" || fail "after cancel: $(cat "$T/st.out")"
expect_error "go after cancel" "is failed" src go "$CID"
h1=$(mem_state "$WC" 0x700000000000 0x700000400000)
sleep 0.2
[ "$(proc_state "$WC")" != T ] || fail "cancel left the process stopped"
[ "$h1" != "$(mem_state "$WC" 0x700000000000 0x700000400000)" ] ||
	fail "the process does not run after cancel"
info "cancel left the process running"

# A prepare stops the process now; a cancel lets it run again.
CID=$(src export "$WC" --deferred)
src go --prepare "$CID" >"$T/prep.out" || fail "prepare: $(cat "$T/prep.out")"
grep -q "^prepared $CID for go" "$T/prep.out" || fail "prepare printed: $(cat "$T/prep.out")"
[ "$(proc_state "$WC")" = T ] || fail "prepare left the process running"
src go --prepare "$CID" >/dev/null || fail "a second prepare was refused"
src cancel "$CID" >/dev/null || fail "cancel after prepare failed"
h1=$(mem_state "$WC" 0x700000000000 0x700000400000)
sleep 0.2
[ "$(proc_state "$WC")" != T ] || fail "cancel after prepare left the process stopped"
[ "$h1" != "$(mem_state "$WC" 0x700000000000 0x700000400000)" ] ||
	fail "the process does not run after a prepare's cancel"
grep -q "stopped by its prepare, runs again" "$T/src.log" ||
	fail "the daemon did not say the prepared process runs again"
info "prepare stopped the process, its cancel let it run: $(cat "$T/prep.out")"

# attach --wait-export: the destination half first. Its attach waits for
# an export under the ID it was given, then goes on as any other. With
# --hold-bulk, no page streams after go until `release` (the target
# faults nothing meanwhile here), and then everything comes.
start_workload WS2 source --size 8M --threads 2 --base 0x510000000000
start_workload WD2 dest --size 8M --threads 2 --prefault --base 0x510000000000
ID2=$(new_id)
R2=510000000000-510000800000
dst attach "$WD2" --from "127.0.0.1:$src_PORT" --id "$ID2" --range "$R2" \
	--wait-export 30 --hold-bulk >"$T/attach2.out" 2>&1 &
ATTACH=$!
# Waiting: it has asked the source, which knows no such ID yet.
for _ in $(seq 200); do
	grep -q "unknown migration ID ${ID2:0:8}" "$T/src.log" && break
	sleep 0.05
done
grep -q "unknown migration ID ${ID2:0:8}" "$T/src.log" || fail "the waiting attach never asked the source: $(tail -n 3 "$T/src.log")"
kill -0 $ATTACH 2>/dev/null || fail "attach before its export ended: $(cat "$T/attach2.out")"
dst status "$ID2" | grep -q 'state *connecting' || fail "waiting attach: $(dst status "$ID2")"
src export "$WS2" --range "$R2" --deferred --keep-source --id "$ID2" >/dev/null
wait $ATTACH || fail "attach that waited for its export: $(cat "$T/attach2.out")"
grep -q '^attached' "$T/attach2.out" || fail "attach printed: $(cat "$T/attach2.out")"
info "attach made before its export: $(head -n 1 "$T/attach2.out")"
# Prepared: the daemon stops the process; go only takes its memory.
src go --prepare "$ID2" >"$T/prep.out" || fail "prepare: $(cat "$T/prep.out")"
[ "$(proc_state "$WS2")" = T ] || fail "prepare left the process running"
src_hash H2 "$WS2" 0x510000000000 0x510000800000
src go "$ID2" >"$T/go.out" || fail "go: $(cat "$T/go.out")"
grep -q "frozen at its prepare" "$T/src.log" || fail "go after a prepare froze again: $(grep ' go: ' "$T/src.log")"
info "go latency: $(cat "$T/go.out")"
sleep 1
dst status "$ID2" --json >"$T/st.json"
[ "$(key "$T/st.json" pages_present)" = 0 ] ||
	fail "pages streamed before release: $(cat "$T/st.json")"
grep -q 'lets the bulk stream start' "$T/src.log" &&
	fail "the source streamed before the destination's release"
expect_error "release of an unknown ID" "unknown migration ID" dst release "$(new_id)"
expect_error "release of an attach without --hold-bulk" "not attached with its bulk lane held" \
	dst release "$ID"
dst release "$ID2" >"$T/rel.out" || fail "release: $(cat "$T/rel.out")"
dst release "$ID2" >/dev/null || fail "a second release was refused"
kill -USR1 "$WD2"
dst wait "$ID2" --timeout 300 >/dev/null || fail "wait after attach-first failed"
wait_verified WD2
[ "$H2" = "$(dst_hash H2 "$WD2" 0x510000000000 0x510000800000)" ] ||
	fail "attach-first: destination differs from the stopped source"
grep -q 'lets the bulk stream start' "$T/src.log" ||
	fail "the source never heard the destination's release"
dst status "$ID2" --json >"$T/st.json"
[ "$(key "$T/st.json" prefetched_pages)" -gt 0 ] ||
	fail "nothing streamed after release: $(cat "$T/st.json")"
info "attach before export, bulk held until release: destination equal to the stopped source, $(key "$T/st.json" prefetched_pages) pages streamed after the release"
# The stream can end before a client releases it (a small target, a fast
# lane): a release of the ended migration is done already, not refused.
dst release "$ID2" >"$T/rel.out" 2>&1 ||
	fail "release after the migration ended: $(cat "$T/rel.out")"

# Bounded: no export comes, the attach fails after --wait-export, saying so.
start_workload WD3 dest --size 4M --threads 1 --base 0x520000000000
t0=$(date +%s%N)
NID=$(new_id)
expect_error "attach whose export never comes" "no export with it came within the" \
	dst attach "$WD3" --from "127.0.0.1:$src_PORT" --id "$NID" --wait-export 2
ms=$((($(date +%s%N) - t0) / 1000000))
[ $ms -ge 1900 ] && [ $ms -lt 10000 ] || fail "--wait-export 2 gave up after $ms ms"
info "--wait-export 2 gave up after $ms ms"
# It asked several times; the source logged the unknown ID once.
n=$(grep -c "unknown migration ID ${NID:0:8}" "$T/src.log")
[ "$n" = 1 ] || fail "the source logged the waited-for ID $n times: $(grep "${NID:0:8}" "$T/src.log")"

# A daemon stopped with a deferred export live leaves its process running
# and remembers nothing of it (no state file before go).
CID=$(src export "$WC" --deferred)
start_workload WP source --size 4M --threads 1 --base 0x740000000000
PID2=$(src export "$WP" --deferred)
src go --prepare "$PID2" >/dev/null || fail "prepare before the daemon's stop"
[ "$(proc_state "$WP")" = T ] || fail "prepare left the process running"
stop_daemon src
[ "$(proc_state "$WC")" != T ] || fail "a stopped daemon left the deferred export's process stopped"
[ "$(proc_state "$WP")" != T ] || fail "a stopped daemon left a prepared export's process stopped"
# (grants/ is the privileged part's: a record of the grant stays, which
# the next daemon drops when its engine takes nothing up by it.)
ls "$(state_dir src)" 2>/dev/null | grep -v '^grants$' | grep -q . &&
	fail "state files of a deferred export: $(ls "$(state_dir src)")"
info "daemon stopped with a deferred export: process runs, no state file"
