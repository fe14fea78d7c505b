#!/usr/bin/env bash
# The control socket is root-only by default; opened up with --control-mode,
# it still lets a caller export or attach only a process it could ptrace
# itself, and shows it only the migrations of such processes.
. "$SRC/tests/lib.sh"
need_root
command -v setpriv >/dev/null || skip "setpriv missing (util-linux)"
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
"${NOBODY[@]}" true 2>/dev/null || skip "setpriv cannot switch to uid 65534 here"
"${NOBODY[@]}" test -x "$CLIENT" || skip "uid 65534 cannot run $CLIENT (build directory not readable)"

# Root only by default.
start_daemon def
[ "$(stat -c %a "$def_SOCK")" = 600 ] || fail "default socket mode $(stat -c %a "$def_SOCK")"
expect_error "default mode, non-root" "permission denied" \
	"${NOBODY[@]}" "$CLIENT" --control "$def_SOCK" status

# Opened to everyone (group given by number, as a test of the flag). The
# test directory must let uid 65534 through to the sockets.
chmod 711 "$T"
start_daemon src --control-mode 0666 --control-group 0
start_daemon dst --control-mode 0666
[ "$(stat -c %a "$src_SOCK")" = 666 ] || fail "--control-mode not applied"
start_workload WS source --size 16M --threads 1
start_workload WD dest --size 16M --threads 1
RANGE=500000000000-500001000000

# uid 65534 may not export or attach a root process.
expect_error "non-root export of root process" "permission denied: uid 65534 may only migrate processes it could ptrace" \
	"${NOBODY[@]}" "$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE"
[ "$(proc_state "$WS")" != T ] || fail "refused export froze the source"
ID=$("$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE")
expect_error "non-root attach to root process" "permission denied: uid 65534 may only migrate processes it could ptrace" \
	"${NOBODY[@]}" "$CLIENT" --control "$dst_SOCK" attach "$WD" \
	--from "$src_ADDR:$src_PORT" --id "$ID" --range "$RANGE"
ls -l "/proc/$WD/fd" | grep -q userfaultfd && fail "refused attach gave the target a userfaultfd"
grep -q "uid 65534 (pid [0-9]*) refused on process $WD" "$T/dst.log" ||
	fail "refusal not logged: $(tail -n 3 "$T/dst.log")"
# ... nor see root's migration, whose ID is a credential.
SAN_WHO="status as uid 65534" checked "$T/status.out" "${NOBODY[@]}" "$CLIENT" --control "$src_SOCK" status || true
grep -q "${ID:0:8}" "$T/status.out" && fail "uid 65534 sees root's migration: $(cat "$T/status.out")"
expect_error "non-root status of root's ID" "unknown migration ID" \
	"${NOBODY[@]}" "$CLIENT" --control "$src_SOCK" status "$ID"

# uid 65534 may export its own process (positive control).
cat >"$T/as-nobody" <<EOF2
#!/bin/sh
exec ${NOBODY[*]} "$WORKLOAD" "\$@"
EOF2
chmod 755 "$T/as-nobody"
WORKLOAD=$T/as-nobody start_workload WN source --size 16M --threads 1
[ "$(stat -c %u "/proc/$WN")" = 65534 ] || fail "workload WN is not uid 65534"
"${NOBODY[@]}" "$CLIENT" --control "$src_SOCK" export "$WN" \
	--range "$RANGE" >"$T/nid.out" 2>&1 || fail "uid 65534 cannot export its own process: $(cat "$T/nid.out")"
info "uid 65534 exported its own process"
"${NOBODY[@]}" "$CLIENT" --control "$src_SOCK" status >"$T/status.out" 2>&1
grep -q "$(head -c 8 "$T/nid.out")" "$T/status.out" || fail "uid 65534 does not see its own migration"
grep -q "${ID:0:8}" "$T/status.out" && fail "uid 65534 sees root's migration"
# Root sees both.
"$CLIENT" --control "$src_SOCK" status >"$T/status.out"
grep -q "${ID:0:8}" "$T/status.out" && grep -q "$(head -c 8 "$T/nid.out")" "$T/status.out" ||
	fail "root does not see every migration: $(cat "$T/status.out")"
# The owner keeps seeing its migration after the process is gone (as after
# a completed migration, which kills the source process).
kill -9 "$WN"
for _ in $(seq 100); do
	[ -e "/proc/$WN/status" ] || break
	[ "$(proc_state "$WN" 2>/dev/null)" = Z ] && break
	sleep 0.05
done
"${NOBODY[@]}" "$CLIENT" --control "$src_SOCK" status >"$T/status.out" 2>&1
grep -q "$(head -c 8 "$T/nid.out")" "$T/status.out" ||
	fail "uid 65534 lost sight of its own migration: $(cat "$T/status.out")"
