#!/usr/bin/env bash
# attach --map: the target maps the memory at another address than the
# source (as two QEMUs map guest RAM), and the source region is mapped onto
# the target's by address pair; a tmpfs file (a VMM's RAM file) and
# anonymous memory, byte-exact. Unmapped source regions are not taken.
# A region's name (export --range ...=NAME) is kept in the source's state
# file: the source's daemon restarts between export and attach.
. "$SRC/tests/lib.sh"
need_root
start_daemon src
start_daemon dst
A=0x500000000000
B=0x5a0000000000
for kind in tmpfs anon; do
	start_workload WS source --size 64M --threads 2 --base $A --kind "$kind"
	start_workload WD dest --size 64M --threads 4 --base $B --kind "$kind" --prefault
	# anon: by name, as two hosts whose RAM files differ in name do.
	NAME= MAP=500000000000:5a0000000000
	[ "$kind" = anon ] && NAME==guest-ram0 MAP=guest-ram0=5a0000000000
	ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "500000000000-500004000000$NAME")
	src_hash H_SRC "$WS" $A $((A + (64 << 20)))
	if [ -n "$NAME" ]; then
		# The name outlives a restart of the source's daemon, and its
		# state file's name records are checked like the rest of it.
		F=$(state_dir src)/$ID.source.state
		kill_daemon src
		grep -q '^name\.0=guest-ram0$' "$F" || fail "no name in the state file: $(cat "$F")"
		cp -p "$F" "$T/pristine"
		# The privileged part's record of the export's grant, put back
		# with the file: a refused file's grant is dropped with it.
		cp -p "$T/src.state/grants/$ID.source.grant" "$T/pristine.grant" ||
			fail "no record of the export's grant"
		sed -i 's/^name\.0=.*/name.0=guest%1Bram0/' "$F"
		state_resum "$F"
		restart_daemon src
		grep -q "name\.0: not printable UTF-8; state file refused" "$T/src.log" ||
			fail "a name with an escape was not refused: $(tail -n 3 "$T/src.log")"
		[ "$(proc_state "$WS")" = T ] || fail "a refused state file let the process go"
		kill_daemon src
		rm -f "$F.refused"
		cp -p "$T/pristine" "$F"
		cp -p "$T/pristine.grant" "$T/src.state/grants/"
		sed -i "s/^name_at\.0=.*/name_at.0=$((A + 4096))/" "$F"
		state_resum "$F"
		restart_daemon src
		grep -q "no region of process $WS starts at 0x500000001000, which the export named guest-ram0" "$T/src.log" ||
			fail "a name for no region was taken: $(tail -n 3 "$T/src.log")"
		kill_daemon src
		cp -p "$T/pristine" "$F"
		cp -p "$T/pristine.grant" "$T/src.state/grants/"
		restart_daemon src
		grep -q "restored export ${ID:0:8}" "$T/src.log" ||
			fail "the export was not restored: $(cat "$T/src.log")"
	fi
	# Without the map nothing matches: the addresses differ.
	if checked "$T/out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$ID"; then
		fail "attach without --map matched a region at another address"
	fi
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" \
		--id "$ID" --map "$MAP" >"$T/attach.out" 2>&1 ||
		fail "attach --map $MAP: $(cat "$T/attach.out")"
	[ -z "$NAME" ] || grep -q "guest-ram0" "$T/attach.out" ||
		fail "the region does not go by its name: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	"$CLIENT" --control "$dst_SOCK" wait "$ID" --timeout 120 >/dev/null || fail "$kind: no completion"
	wait_verified WD >/dev/null
	H_DST=$(dst_hash H_SRC "$WD" $B $((B + (64 << 20))))
	[ "$H_SRC" = "$H_DST" ] || fail "$kind: destination at $B differs from the source at $A"
	info "$kind: source at $A, target at $B (--map $MAP): byte-exact"
	kill "$WD"
done

# Two source regions (a read-only page range splits one mapping) mapped
# onto overlapping ranges of the target: refused, the target untouched.
# (Taken, both were registered and installed into the same pages.)
start_workload WS source --size 64M --threads 1 --base $A --ro-pages 256
start_workload WD dest --size 64M --threads 1 --base $B
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range 500000000000-500004000000)
h_before=$(mem_state "$WD" $B $((B + (64 << 20))))
if checked "$T/out" "$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" --id "$ID" \
	--map 500000000000:5a0000000000 --map 500002100000:5a0000100000; then
	fail "attach with overlapping maps succeeded: $(cat "$T/out")"
fi
grep -q "would both go to" "$T/out" || fail "overlapping maps: $(cat "$T/out")"
info "overlapping maps refused: $(cat "$T/out")"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "refused attach left a userfaultfd in the target"
[ "$(mem_state "$WD" $B $((B + (64 << 20))))" = "$h_before" ] || fail "refused attach changed the target"

# Names: one a mapping, each at most once, and only a name that is there
# matches. The read-only pages split the range into several mappings.
start_workload WS3 source --size 64M --threads 1 --base 0x600000000000 --ro-pages 256
expect_error "a name over several mappings" "mappings; a name goes with exactly one" \
	"$CLIENT" --control "$src_SOCK" export "$WS3" --range 600000000000-600004000000=ram
[ "$(proc_state "$WS3")" != T ] || fail "a refused export left the process stopped"
expect_error "an empty name" "NAME that is not empty" \
	"$CLIENT" --control "$src_SOCK" export "$WS3" --range 600000000000-600004000000=
start_workload WS2 source --size 64M --threads 1 --base $A --kind anon
ID=$("$CLIENT" --control "$src_SOCK" export "$WS2" --range 500000000000-500004000000=ram)
expect_error "a map by a name the source has not" "no region" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" --id "$ID" \
	--map other=5a0000000000
expect_error "one name mapped twice" "name the same source region" \
	"$CLIENT" --control "$dst_SOCK" attach "$WD" --from "$src_ADDR:$src_PORT" --id "$ID" \
	--map ram=5a0000000000 --map ram=5a0000100000
[ "$(mem_state "$WD" $B $((B + (64 << 20))))" = "$h_before" ] || fail "refused attaches changed the target"
