#!/usr/bin/env bash
# snapshot: every page of a frozen process (anonymous, memfd, shared
# hugetlb) reaches the image byte for byte, checked against SHA-256 of its
# memory read independently (memhash); the process is killed after, or
# with --keep-source runs on. image check refuses a changed or cut image.
# The file is the caller's to make: a caller cannot snapshot a process it
# could not export, nor have the daemon write where it could not write
# itself, nor replace a file; a snapshot that fails (a full disk) leaves
# no file and the process running.
. "$SRC/tests/lib.sh"
need_root
BASE=0x500000000000

# stopped VAR: stops the workload and waits until it is (state T).
stopped() {
	kill -STOP "${!1}"
	for _ in $(seq 100); do
		[ "$(proc_state "${!1}")" = T ] && return
		sleep 0.02
	done
	fail "workload $1 did not stop"
}

# gone PID: the process was killed (gone, or a zombie not yet reaped).
gone() {
	for _ in $(seq 100); do
		[ -e "/proc/$1/status" ] || return 0
		[ "$(proc_state "$1" 2>/dev/null)" = Z ] && return 0
		sleep 0.05
	done
	return 1
}

# byte_exact KIND SIZE [WORKLOAD ARGS]: snapshot of a stopped workload,
# its image's bytes (image dump) against memhash of the process.
byte_exact() {
	local kind=$1 size=$2 end img h_mem h_img
	shift 2
	end=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$size"))))
	img=$T/$kind.$RANDOM.img
	start_workload WK source --kind "$kind" --size "$size" --threads 2 "$@"
	stopped WK
	# The snapshot first: a read of /proc/PID/mem maps the zero page
	# where nothing was, and holes would no longer be holes.
	"$CLIENT" --control "$s_SOCK" snapshot "$WK" --to "$img" --keep-source \
		--range "${BASE#0x}-${end#0x}" >"$T/snap.out" 2>&1 ||
		fail "$kind: snapshot failed: $(cat "$T/snap.out")"
	# Stopped before, so left stopped: its memory is as it was taken.
	[ "$(proc_state "$WK")" = T ] || fail "$kind: a stopped process was not left stopped"
	h_mem=$("$MEMHASH" "$WK" "$BASE" "$end")
	kill -9 "$WK"
	"$CLIENT" image info "$img" >"$T/info.out" || fail "$kind: image info: $(cat "$T/info.out")"
	grep -q "every checksum verified" "$T/info.out" || fail "$kind: $(cat "$T/info.out")"
	[ "$(stat -c %a "$img")" = 600 ] || fail "$kind: image mode $(stat -c %a "$img"), not 600"
	h_img=$("$CLIENT" image dump "$img" "${BASE#0x}-${end#0x}" | sha256sum | cut -d' ' -f1)
	[ "$h_img" = "$h_mem" ] || fail "$kind: image differs from the process's memory"
	info "$kind $size: byte for byte; $(grep '^total' "$T/info.out")"
}

start_daemon s --control-mode 0666
chmod 711 "$T"

byte_exact anon 32M --untouched-every 7 --zero-every 5
byte_exact memfd 16M --untouched-every 3
# Swapped-out pages are data, read back in (zram swap, where there is).
if command -v zramctl >/dev/null &&
	{ [ -e /sys/class/zram-control/hot_add ] || modprobe zram 2>/dev/null; } &&
	[ -e /sys/class/zram-control/hot_add ]; then
	set_up_zram_swap 256M
	byte_exact anon 32M --pageout-every 3
	swapped=$(sed -n 's/^swapped //p' "$T/WK.out")
	[ "${swapped:-0}" -gt 1000 ] || fail "too few pages swapped out ($swapped)"
	info "swapped: $swapped pages were out at the snapshot"
else
	skip_part "swapped pages: no zram here"
fi
if reserve_huge_pages 16; then
	byte_exact hugetlb-shared 32M --zero-every 4
else
	skip_part "shared hugetlb: cannot reserve 16 huge pages"
fi

# --keep-source: the process runs on (it was running before).
start_workload WR source --size 16M --threads 2
"$CLIENT" --control "$s_SOCK" snapshot "$WR" --to "$T/kept.img" --keep-source \
	>"$T/snap.out" 2>&1 || fail "keep-source: $(cat "$T/snap.out")"
grep -q "left running" "$T/snap.out" || fail "keep-source: $(cat "$T/snap.out")"
[ "$(proc_state "$WR")" != T ] || fail "keep-source: process left stopped"
"$CLIENT" image check "$T/kept.img" >/dev/null || fail "kept image does not check"
info "keep-source: process running, image checks"

# A changed or cut image is refused, with what is wrong.
IMG=$T/kept.img
SZ=$(stat -c %s "$IMG")
cp "$IMG" "$T/bad.img"
flip_byte "$T/bad.img" $((4096 + 100))
expect_error "data byte changed" "checksum mismatch" "$CLIENT" image check "$T/bad.img"
cp "$IMG" "$T/bad.img"
flip_byte "$T/bad.img" 30
expect_error "header byte changed" "header checksum" "$CLIENT" image check "$T/bad.img"
cp "$IMG" "$T/bad.img"
flip_byte "$T/bad.img" $((SZ - 10))
expect_error "index byte changed" "page index checksum" "$CLIENT" image check "$T/bad.img"
head -c $((SZ - 64)) "$IMG" >"$T/cut.img"
expect_error "truncated" "truncated" "$CLIENT" image check "$T/cut.img"
head -c 1000 "$IMG" >"$T/cut.img"
expect_error "cut in the header" "shorter than an image header" "$CLIENT" image check "$T/cut.img"
expect_error "not an image" "bad magic" "$CLIENT" image check "$UFFDD"
expect_error "missing" "No such file" "$CLIENT" image check "$T/none.img"

# An existing file is never replaced, and the process is not touched.
echo keep >"$T/exists"
expect_error "existing file" "exists" "$CLIENT" --control "$s_SOCK" snapshot "$WR" --to "$T/exists"
[ "$(cat "$T/exists")" = keep ] || fail "existing file changed"
[ "$(proc_state "$WR")" != T ] || fail "refused snapshot left the process stopped"

# The trust boundary, as uid 65534.
command -v setpriv >/dev/null || skip "setpriv missing (util-linux)"
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
"${NOBODY[@]}" test -x "$CLIENT" || skip "uid 65534 cannot run $CLIENT"
mkdir "$T/nb" && chown 65534:65534 "$T/nb"
expect_error "non-root snapshot of a root process" "permission denied" \
	"${NOBODY[@]}" "$CLIENT" --control "$s_SOCK" snapshot "$WR" --to "$T/nb/root.img"
[ "$(proc_state "$WR")" != T ] || fail "refused snapshot froze the process"
[ -e "$T/nb/root.img" ] && fail "refused snapshot left a file"
cat >"$T/as-nobody" <<EOF2
#!/bin/sh
exec ${NOBODY[*]} "$WORKLOAD" "\$@"
EOF2
chmod 755 "$T/as-nobody"
WORKLOAD=$T/as-nobody start_workload WN source --size 8M --threads 1
expect_error "into /etc" "cannot make an image file there" \
	"${NOBODY[@]}" "$CLIENT" --control "$s_SOCK" snapshot "$WN" --to /etc/uffdd-snapshot-test
[ -e /etc/uffdd-snapshot-test ] && fail "a file appeared in /etc"
echo secret >"$T/rootfile" && chmod 600 "$T/rootfile"
ln -s "$T/rootfile" "$T/nb/link"
expect_error "onto a symlink to a root file" "exists" \
	"${NOBODY[@]}" "$CLIENT" --control "$s_SOCK" snapshot "$WN" --to "$T/nb/link"
[ "$(cat "$T/rootfile")" = secret ] || fail "root's file changed through a symlink"
[ "$(proc_state "$WN")" != T ] || fail "refused snapshot left the process stopped"
"${NOBODY[@]}" "$CLIENT" --control "$s_SOCK" snapshot "$WN" --to "$T/nb/own.img" \
	>"$T/snap.out" 2>&1 || fail "uid 65534 cannot snapshot its own process: $(cat "$T/snap.out")"
[ "$(stat -c %u "$T/nb/own.img")" = 65534 ] || fail "image not owned by the caller"
gone "$WN" || fail "own process not killed after its snapshot"
info "uid 65534: its own process into its own directory; image owned by it"

# A raw client (tests the daemon's side alone): the daemon takes only a
# new nameless file open for writing, and a client that gives up (says
# anything but C) or hangs up once the image is written has the process
# let go, not killed.
command -v python3 >/dev/null || skip "python3 missing"
cat >"$T/raw.py" <<'PY'
import array, os, socket, struct, sys
path, pid, d, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def frame(s):
    t, _, ml, _ = struct.unpack(">HHII", s.recv(12, socket.MSG_WAITALL))
    return t, (s.recv(ml, socket.MSG_WAITALL) if ml else b"")
v, msg = pid, b"\x08"
while True:
    msg += bytes([(v & 0x7F) | (0x80 if v >> 7 else 0)])
    v >>= 7
    if not v:
        break
s = socket.socket(socket.AF_UNIX)
s.connect(path)
s.sendall(struct.pack(">HHII", 120, 0, len(msg), 0) + msg)
print("ready" if frame(s)[0] == 121 else "no ready")
if mode == "named":
    fd = os.open(os.path.join(d, "named"), os.O_RDWR)
else:
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
    if mode == "rdonly":
        fd = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY)
s.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
t, m = frame(s)
if t == 122 and mode == "abort":
    s.sendall(b"A")
    t, m = frame(s)
elif t == 122 and mode == "hangup":
    s.close()
    print("hung up")
    sys.exit(0)
elif t == 122 and mode == "stall":
    print("written", flush=True)
    s.recv(1)
    sys.exit(0)
print(t, m)
PY
start_workload WP source --size 8M --threads 1
echo keep >"$T/named"
for mode in named:"not a new, empty and unnamed" rdonly:"not open for writing" \
	abort:"did not keep the image" hangup:"hung up"; do
	python3 "$T/raw.py" "$s_SOCK" "$WP" "$T" "${mode%%:*}" >"$T/raw.out" 2>&1 || true
	grep -q "${mode#*:}" "$T/raw.out" || fail "raw client, ${mode%%:*}: $(cat "$T/raw.out")"
	for _ in $(seq 50); do
		[ "$(proc_state "$WP")" != T ] && break
		sleep 0.1
	done
	[ "$(proc_state "$WP")" != T ] || fail "raw client, ${mode%%:*}: process left stopped"
	info "raw client, ${mode%%:*}: $(tail -n 1 "$T/raw.out"); process running"
done
[ "$(cat "$T/named")" = keep ] || fail "named file written"
grep -q "the client went away" "$T/s.log" || fail "daemon log does not say the client went away"

# A process continued from elsewhere during the snapshot: refused (when
# the freeze is not refused first), no file, and the process, which holds
# the newest bytes, left stopped: the reply says so (the loop's last
# SIGCONT may come after the daemon stopped it).
start_workload WC source --size 64M --threads 2
# Until the snapshot has answered, however long it takes here.
(while [ ! -e "$T/conts.stop" ]; do
	kill -CONT "$WC" 2>/dev/null
	sleep 0.005
done) &
CONTS=$!
on_cleanup "kill $CONTS 2>/dev/null || true"
expect_error "continued meanwhile" "continued\|cannot stop" \
	"$CLIENT" --control "$s_SOCK" snapshot "$WC" --to "$T/cont.img"
touch "$T/conts.stop"
wait "$CONTS" || true
[ -e "$T/cont.img" ] && fail "a refused snapshot left its file"
if grep -q "continued" "$T/out"; then
	grep -q "the image is not kept; process $WC left stopped" "$T/out" ||
		fail "continued meanwhile: $(cat "$T/out")"
fi

# A full disk: the snapshot fails, no file is left, the process runs on.
mkdir "$T/small"
mount -t tmpfs -o size=2M tmpfs "$T/small" || skip "cannot mount a tmpfs"
on_cleanup "umount $T/small"
start_workload WF source --size 16M --threads 2
expect_error "disk full" "No space left" \
	"$CLIENT" --control "$s_SOCK" snapshot "$WF" --to "$T/small/full.img"
[ -z "$(ls -A "$T/small")" ] || fail "a failed snapshot left $(ls -A "$T/small")"
[ "$(df --output=used -k "$T/small" | tail -n 1 | tr -d ' ')" -lt 100 ] ||
	fail "the space of the failed image was not given back"
[ "$(proc_state "$WF")" != T ] || fail "failed snapshot left the process stopped"
kill -0 "$WF" || fail "failed snapshot killed the process"
grep -q "process thawed" "$T/s.log" || fail "daemon log does not say the process was thawed"
info "disk full: no file left, process running"

# The daemon stops while a snapshot waits for its client: the process is
# let go, and the daemon exits cleanly (stop_daemon checks its status and
# its sanitizer reports).
start_workload WS source --size 8M --threads 1
python3 "$T/raw.py" "$s_SOCK" "$WS" "$T" stall >"$T/raw.out" 2>&1 &
RAW=$!
for _ in $(seq 100); do
	grep -q written "$T/raw.out" && break
	sleep 0.1
done
grep -q written "$T/raw.out" || fail "raw client, stall: $(cat "$T/raw.out")"
[ "$(proc_state "$WS")" = T ] || fail "process not frozen while its image waits"
stop_daemon s
wait "$RAW" || true
[ "$(proc_state "$WS")" != T ] || fail "daemon stopped with the process still frozen"
grep -q "given up: the daemon stops" "$T/s.log" || fail "daemon log does not say the snapshot was given up"
info "daemon stopped mid-snapshot: process let go, clean exit"
