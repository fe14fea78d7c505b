#!/usr/bin/env bash
# Both daemons run with only the capabilities systemd/uffdd.service leaves
# them (its CapabilityBoundingSet=, read from the unit, and
# NoNewPrivileges=): root, but nothing else; the engine as the user
# systemd/uffdd.conf names. Every memory kind migrates
# byte-exact that way: private anonymous, shared anonymous, memfd, a tmpfs
# file (QEMU's /dev/shm guest RAM), a private file mapping on disk.
# Before the unit named CAP_CHECKPOINT_RESTORE, the kinds found through
# /proc/PID/map_files were refused or left behind under it. Then the same
# without CAP_CHECKPOINT_RESTORE: the daemon says so at start, refuses an
# export or an attach of such memory naming the capability, and leaves
# both processes as they were; private anonymous memory still migrates.
. "$SRC/tests/lib.sh"
need_root
UNIT=$SRC/systemd/uffdd.service
caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$UNIT")
[ -n "$caps" ] || fail "no CapabilityBoundingSet= in $UNIT"
bounding=-all
for c in $caps; do
	c=${c#CAP_}
	bounding="$bounding,+${c,,}"
done
nnp=
grep -q '^NoNewPrivileges=yes$' "$UNIT" && nnp=--no-new-privs
info "the unit's capabilities: $caps${nnp:+, no new privileges}"
setpriv $nnp --bounding-set="$bounding" true 2>"$T/setpriv.err" ||
	skip "setpriv cannot set the bounding set $bounding: $(cat "$T/setpriv.err")"

# run_daemon starts "$UFFDD": make that the daemon under a bounding set.
REAL_UFFDD=$UFFDD
wrap() {
	cat >"$T/uffdd-$1" <<EOF
#!/bin/sh
exec setpriv $nnp --bounding-set=$2 "$REAL_UFFDD" "\$@"
EOF
	chmod +x "$T/uffdd-$1"
	UFFDD=$T/uffdd-$1
}
wrap unit "$bounding"
# As the packaged configuration runs it: the engine as its own user.
eu=$(sed -n 's/^engine-user //p' "$SRC/systemd/uffdd.conf")
if [ -n "$eu" ]; then
	need_engine_user
	export UFFDD_TEST_ENGINE_USER=$eu
	info "the engine runs as $eu, as systemd/uffdd.conf says"
fi

DIR=/var/tmp/uffdd-unit-caps-$$
mkdir -p "$DIR"
on_cleanup "rm -rf $DIR"
for kind in anon shared memfd tmpfs file-private; do
	info "kind $kind"
	extra=
	if [ "$kind" = file-private ]; then
		case $(stat -f -c %T "$DIR") in
		tmpfs | ramfs)
			skip_part "file-private: $DIR is not on a disk filesystem"
			continue
			;;
		esac
		rm -f "$DIR/data"
		extra="--file $DIR/data"
	fi
	migrate 16M 2 2 "--kind $kind $extra --untouched-every 4 --zero-every 16" \
		"--kind $kind $extra --untouched-every 4 --zero-every 16"
	grep -q "exported process $WS as .*: [1-9][0-9]* region" "$T/src.log" ||
		fail "$kind: no region exported: $(grep exported "$T/src.log" | tail -n 1)"
	kill "$WD"
done
# The daemons really ran without the rest.
for d in src dst; do
	pid=$(eval echo "\$${d}_PID")
	bnd=$(sed -n 's/^CapBnd:\t//p' "/proc/$pid/status")
	[ "$bnd" != 000001ffffffffff ] && [ "$bnd" != 0000003fffffffff ] ||
		fail "$d daemon has the full capability set ($bnd)"
	info "$d daemon CapBnd $bnd"
done

# Without CAP_CHECKPOINT_RESTORE.
less=${bounding/,+checkpoint_restore/}
[ "$less" != "$bounding" ] || fail "the unit has no CAP_CHECKPOINT_RESTORE"
wrap less "$less"
start_daemon srcl
start_daemon dstl
for d in srcl dstl; do
	grep -q "map_files no" "$T/$d.log" || fail "$d: kernel line lacks 'map_files no': $(cat "$T/$d.log")"
	grep -q "CAP_CHECKPOINT_RESTORE.*cannot migrate" "$T/$d.log" ||
		fail "$d: no warning at start: $(cat "$T/$d.log")"
done
grep -q "map_files yes" "$T/src.log" || fail "the unit's daemon says it cannot open map_files"
RANGE=500000000000-500001000000
start_workload WS source --size 16M --kind memfd
start_workload WD dest --size 16M --kind memfd
h_dst=$(mem_state "$WD" 0x500000000000 0x500001000000)
if checked "$T/out" "$CLIENT" --control "$srcl_SOCK" export "$WS" --range "$RANGE"; then
	fail "export of a memfd without CAP_CHECKPOINT_RESTORE succeeded: $(cat "$T/out")"
fi
grep -q "CAP_CHECKPOINT_RESTORE.*0x500000000000" "$T/out" || fail "export refusal does not say why: $(cat "$T/out")"
info "export refused: $(cat "$T/out")"
[ "$(proc_state "$WS")" != T ] || fail "refused export left the source stopped"
# The destination side: a source that can, a destination that cannot.
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
if checked "$T/out" "$CLIENT" --control "$dstl_SOCK" attach "$WD" --from "127.0.0.1:$src_PORT" \
	--id "$ID" --range "$RANGE"; then
	fail "attach to a memfd without CAP_CHECKPOINT_RESTORE succeeded: $(cat "$T/out")"
fi
grep -q "CAP_CHECKPOINT_RESTORE.*0x500000000000" "$T/out" || fail "attach refusal does not say why: $(cat "$T/out")"
info "attach refused: $(cat "$T/out")"
case $(proc_state "$WD") in T | t) fail "refused attach left the target stopped" ;; esac
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "refused attach left a userfaultfd in the target"
[ "$(mem_state "$WD" 0x500000000000 0x500001000000)" = "$h_dst" ] ||
	fail "refused attach changed the target's memory"
kill -9 "$WS" "$WD"
# Private anonymous memory needs no backing file.
info "private anonymous memory without CAP_CHECKPOINT_RESTORE"
src_PID=$srcl_PID src_PORT=$srcl_PORT src_SOCK=$srcl_SOCK src_ARGS=
dst_PID=$dstl_PID dst_PORT=$dstl_PORT dst_SOCK=$dstl_SOCK dst_ARGS=
migrate 16M 2 2 "--kind anon --untouched-every 4" "--kind anon --untouched-every 4"
