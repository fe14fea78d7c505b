#!/usr/bin/env bash
# A hole punched in shared memory reaches the destination as no uffd
# event (chaos seed 2027 round 157). For memfd, a tmpfs file and shared
# anonymous memory: the destination's target fetches 256 pages, punches a
# hole over them (fallocate) and waits; the destination daemon is
# SIGKILLed and started again (once its engine alone), and only then does
# the target read its memory. It must read zeros where it punched and
# the source's bytes elsewhere: the restarted daemon knows from its
# record of installed pages (ID.destination.installed, docs/state-files.md)
# that those pages went in once, where the pagemap shows them never
# installed. The same for a forked child that reads a hole its parent
# punched, with no restart. The target checks every word itself, and its
# memory is hashed from outside, independent of the daemons. Then a record cut
# short is refused at the restart, with the reason, never trusted (and
# kept for a look, as the state file is).
. "$SRC/tests/lib.sh"
need_root
make_hosts

SIZE=$((32 << 20))
# The workload's --event pages: [size / 4, size / 4 + 256 pages).
HOLE=$((SIZE / 4))
HOLE_LEN=$((256 * 4096))
ZEROS=$(head -c "$HOLE_LEN" /dev/zero | sha256sum | cut -d' ' -f1)

# until_out VAR LINE: the workload VAR printed LINE.
until_out() {
	for _ in $(seq 300); do
		grep -q "^$2" "$T/$1.out" && return
		kill -0 "${!1}" 2>/dev/null || fail "workload $1 died: $(cat "$T/$1.log")"
		sleep 0.05
	done
	fail "workload $1 never printed $2"
}

# kill_engine NAME: the engine alone dies; the privileged part starts a
# new one, which takes the migrations up from the state files.
kill_engine() {
	local eng
	eng=$(engine_pid "$1")
	[ -n "$eng" ] || fail "daemon $1 has no engine"
	kill -9 "$eng"
	for _ in $(seq 200); do
		e=$(engine_pid "$1")
		[ -n "$e" ] && [ "$e" != "$eng" ] && return
		sleep 0.05
	done
	fail "no new engine for $1: $(tail -n 5 "$T/$1.log")"
}

# start KIND BASE [EVENT]: a paced migration of 32 MiB of KIND whose
# target punched its hole and waits (EVENT punch-wait, the default), or
# punched it and forked (fork-punch). Sets ID, LO, HI, H_LO, H_HI.
start() {
	local kind=$1 base=$2 ev=${3:-punch-wait} end range
	end=$((base + SIZE))
	range=$(printf '%x-%x' "$base" "$end")
	LO=$((base + HOLE))
	HI=$((LO + HOLE_LEN))
	start_workload WS source --kind "$kind" --size 32M --threads 2 --base "$base"
	start_workload WD dest --kind "$kind" --size 32M --threads 4 --base "$base" \
		--event "$ev"
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$range")
	src_hash H_LO "$WS" "$base" "$LO"
	src_hash H_HI "$WS" "$HI" "$end"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$ID" --range "$range" >/dev/null
	kill -USR1 "$WD"
	[ "$ev" = punch-wait ] || return 0
	until_out WD punched
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json | grep -q '"state":"running"' ||
		fail "$kind: migration not running once the hole is punched"
	[ -f "$(state_dir dst)/$ID.destination.installed" ] ||
		fail "$kind: no record of installed pages: $(ls "$(state_dir dst)")"
}

# finish KIND BASE: the migration completes; zeros in the hole, the
# source's bytes elsewhere.
finish() {
	local kind=$1 base=$2 end
	end=$((base + SIZE))
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >"$T/wait.out" ||
		fail "$kind: wait: $(cat "$T/wait.out")"
	wait_verified WD
	[ "$(dst_hash H_LO "$WD" "$base" "$LO")" = "$H_LO" ] ||
		fail "$kind: below the hole, the destination differs from the source"
	[ "$(dst_hash H_HI "$WD" "$HI" "$end")" = "$H_HI" ] ||
		fail "$kind: above the hole, the destination differs from the source"
	[ "$("$MEMHASH" "$WD" "$LO" "$HI")" = "$ZEROS" ] ||
		fail "$kind: the punched hole does not read as zeros"
	"$CLIENT" --control "$src_SOCK" wait "$ID" --timeout 60 >/dev/null ||
		fail "$kind: the source did not complete"
	[ ! -e "$(state_dir dst)/$ID.destination.installed" ] ||
		fail "$kind: the record of installed pages outlived its migration"
}

one() {
	local kind=$1 base=$2 how=$3
	info "$kind: hole punched over installed pages, then the destination $how is killed"
	start "$kind" "$base"
	if [ "$how" = engine ]; then
		kill_engine dst
	else
		kill_daemon dst
		restart_daemon dst
	fi
	kill -USR2 "$WD"
	finish "$kind" "$base"
	info "$kind ($how killed): complete; zeros in the hole, the source's bytes elsewhere"
	kill "$WD"
}

start_daemon src --bulk-rate 4M
start_daemon dst
one memfd 0x500000000000 daemon
one tmpfs 0x510000000000 daemon
one shared 0x520000000000 daemon
one memfd 0x530000000000 engine
grep -q "restored migration" "$T/dst.log" || fail "the destination restored nothing"

# No restart: the hole is punched before a fork, and the child, whose
# page map follows its parent's, reads it first. The record says those
# pages went in: a zero page, not the source's bytes asked for again.
info "memfd: a forked child reads the hole its parent punched"
start memfd 0x550000000000 fork-punch
wait_child_verified WD "forked child"
finish memfd 0x550000000000
# Asked for again and again (each answer found the page present in the
# parent, and woke the child to fault again), the hole's 1 MiB came over
# and over until the child was let go (44 MiB moved here, not 32).
bytes=$("$CLIENT" --control "$dst_SOCK" status "$ID" --json | grep -o '"bytes":[0-9]*' | head -n 1 | cut -d: -f2)
[ "${bytes:-0}" -gt 0 ] && [ "$bytes" -lt $((SIZE * 5 / 4)) ] ||
	fail "fork-punch: $bytes bytes moved for $SIZE: the hole was asked for again and again"
info "fork-punch: complete, $bytes bytes moved; zeros in the hole in the child and the parent"
kill "$WD"

info "a record of installed pages cut short is refused, not trusted"
start memfd 0x540000000000
kill_daemon dst
truncate -s 100 "$(state_dir dst)/$ID.destination.installed"
restart_daemon dst
for _ in $(seq 100); do
	"$CLIENT" --control "$dst_SOCK" status "$ID" --json 2>/dev/null |
		grep -q '"state":"failed"' && break
	sleep 0.1
done
"$CLIENT" --control "$dst_SOCK" status "$ID" --json >"$T/st.json" 2>&1
grep -q "record of installed pages" "$T/st.json" ||
	fail "the cut record was not refused with its reason: $(cat "$T/st.json")"
[ -f "$(state_dir dst)/$ID.destination.state.refused" ] ||
	fail "the state file was not kept aside: $(ls "$(state_dir dst)")"
[ -f "$(state_dir dst)/$ID.destination.installed" ] ||
	fail "the refused record was not kept beside the refused state file"
info "cut record: $(grep -o 'record of installed pages[^"]*' "$T/st.json" | head -n 1)"
kill -9 "$WD"
