#!/usr/bin/env bash
# Lazy restore from a snapshot image (issue 22 stage 2). A workload of
# each memory kind an export takes is snapshotted (--keep-source, so that
# tests/memhash hashes the process as it was taken), then restored into
# THREE processes at once with attach --image, each byte-exact against that
# hash and checked word by word by the workload itself. An image served by
# another daemon with export --image (TLS unless the suite runs plaintext)
# restores byte-exact too, also once its file is removed. An image that is
# corrupted, truncated or missing is refused at attach, with the target
# left as it was; one corrupted or truncated during the restore fails it
# loudly: lost pages poisoned (SIGBUS), and no page ever reads wrong; so
# does one found in its state directory by a restarted daemon.
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

# snap NAME SIZE SRC_ARGS: snapshot of a stopped workload into $T/NAME.img
# (IMG); H_SRC its memory's SHA-256 once written, RANGE and END its range.
snap() {
	local name=$1 size=$2 sargs=$3
	END=$(printf '0x%x' $((BASE + $(numfmt --from=iec "$size"))))
	RANGE=${BASE#0x}-${END#0x}
	IMG=$T/$name.img
	# shellcheck disable=SC2086
	start_workload WS source --size "$size" --threads 2 $sargs
	stopped WS
	SRC_AHP=$(anon_huge_kb "$WS" "$BASE" "$END")
	# The snapshot first: a read of /proc/PID/mem maps the zero page
	# where nothing was, and holes would no longer be holes.
	"$CLIENT" --control "$d_SOCK" snapshot "$WS" --to "$IMG" --keep-source \
		--range "$RANGE" >"$T/snap.out" 2>&1 ||
		fail "$name: snapshot failed: $(cat "$T/snap.out")"
	H_SRC=$("$MEMHASH" "$WS" "$BASE" "$END")
	kill -9 "$WS"
}

# restore N NAME SIZE DST_ARGS: N targets restored from IMG at once by
# daemon d, each checked by itself (word by word) and against H_SRC.
restore() {
	local n=$1 name=$2 size=$3 dargs=$4 i pids=() h
	for i in $(seq "$n"); do
		# shellcheck disable=SC2086
		start_workload "WD$i" dest --size "$size" --threads 2 --prefault $dargs
	done
	for i in $(seq "$n"); do
		"$CLIENT" --control "$d_SOCK" attach "$(eval echo "\$WD$i")" --image "$IMG" \
			--range "$RANGE" --wait >"$T/attach$i.out" 2>&1 &
		pids+=($!)
	done
	# Each target is let go to check its pages once its attach is set up.
	for i in $(seq "$n"); do
		for _ in $(seq 600); do
			grep -q '^attached' "$T/attach$i.out" && break
			kill -0 "${pids[$((i - 1))]}" 2>/dev/null || break
			sleep 0.05
		done
		grep -q '^attached' "$T/attach$i.out" || fail "$name: attach $i: $(cat "$T/attach$i.out")"
		kill -USR1 "$(eval echo "\$WD$i")"
	done
	for i in $(seq "$n"); do
		wait "${pids[$((i - 1))]}" || fail "$name: restore $i: $(cat "$T/attach$i.out")"
	done
	for i in $(seq "$n"); do
		wait_verified "WD$i"
		h=$("$MEMHASH" "$(eval echo "\$WD$i")" "$BASE" "$END")
		[ "$h" = "$H_SRC" ] || fail "$name: target $i differs from the process snapshotted"
		kill -9 "$(eval echo "\$WD$i")"
	done
	info "$name $size: $n targets restored at once, each byte for byte ($(grep -m1 '^  moved' "$T/attach1.out" | sed 's/^ *//'))"
}

start_daemon d
start_daemon s

# Every memory kind an export takes, three targets each.
snap anon 32M "--untouched-every 7 --zero-every 5"
restore 3 anon 32M "--untouched-every 7 --zero-every 5"
# The restores' reads of the image are counted, by how (the metrics).
"$CLIENT" --control "$d_SOCK" metrics >"$T/metrics.txt"
io=io_uring
grep -q "image: read with pread" "$T/d.log" && io=pread
grep -Eq "^uffdd_image_reads_total\{io=\"$io\"\} [1-9]" "$T/metrics.txt" ||
	fail "image reads not counted: $(grep image_read "$T/metrics.txt")"
info "image reads counted: $(grep '^uffdd_image_reads_total' "$T/metrics.txt" | tr '\n' ' ')"
for kind in thp shared memfd tmpfs; do
	snap "$kind" 16M "--kind $kind --untouched-every 3 --zero-every 5"
	[ "$kind" != thp ] || [ "$SRC_AHP" -ge $((16 * 1024 / 2)) ] ||
		fail "thp: the source had only $SRC_AHP kB of its 16 MiB in huge pages at the snapshot"
	restore 3 "$kind" 16M "--kind $kind --untouched-every 3 --zero-every 5"
done
DIR=/var/tmp/uffdd-image-restore-$$
mkdir -p "$DIR" && on_cleanup "rm -rf $DIR"
FILE=$DIR/data
snap file-private 16M "--kind file-private --file $FILE --untouched-every 4 --zero-every 16 --ro-pages 256"
restore 3 file-private 16M "--kind file-private --file $FILE --untouched-every 4 --zero-every 16 --ro-pages 256"
if command -v zramctl >/dev/null &&
	{ [ -e /sys/class/zram-control/hot_add ] || modprobe zram 2>/dev/null; } &&
	[ -e /sys/class/zram-control/hot_add ]; then
	set_up_zram_swap 256M
	snap swapped 32M "--pageout-every 3 --zero-every 16"
	restore 3 swapped 32M "--zero-every 16"
else
	skip_part "swapped pages: no zram here"
fi
# Four processes with 16 MiB of 2 MiB pages each.
if reserve_huge_pages 40; then
	snap hugetlb-shared 16M "--kind hugetlb-shared --zero-every 4"
	restore 3 hugetlb-shared 16M "--kind hugetlb-shared --zero-every 4"
	snap hugetlb 16M "--kind hugetlb"
	restore 3 hugetlb 16M "--kind hugetlb"
else
	skip_part "hugetlb: cannot reserve 40 huge pages"
fi

# export --image: daemon s serves the image to daemon d over the peer
# lanes, as it serves a process; the image's file may go once handed over.
snap served 32M "--untouched-every 7 --zero-every 5"
cp "$IMG" "$T/served2.img"
ID=$("$CLIENT" --control "$s_SOCK" export --image "$IMG") || fail "export --image: $ID"
rm -f "$IMG"
start_workload WD1 dest --size 32M --threads 2 --prefault --untouched-every 7 --zero-every 5
"$CLIENT" --control "$d_SOCK" attach "$WD1" --from "127.0.0.1:$s_PORT" --id "$ID" \
	--range "$RANGE" >"$T/attach.out" || fail "attach from export --image: $(cat "$T/attach.out")"
kill -USR1 "$WD1"
"$CLIENT" --control "$d_SOCK" wait "$ID" --timeout 300 >"$T/wait.out" || fail "wait: $(cat "$T/wait.out")"
"$CLIENT" --control "$s_SOCK" wait "$ID" --timeout 60 >/dev/null || fail "the serving daemon did not complete"
wait_verified WD1
[ "$("$MEMHASH" "$WD1" "$BASE" "$END")" = "$H_SRC" ] || fail "export --image: target differs"
kill -9 "$WD1"
info "export --image over $(grep -q 'TLS 1.3' "$T/s.log" && echo TLS || echo plaintext): byte for byte, the file removed after export"
expect_error "export --image with a pid" "usage" "$CLIENT" --control "$s_SOCK" export 1 --image "$T/served2.img"
IMG=$T/served2.img

# Refused at attach, the target untouched: missing, truncated, header or
# tables changed, not an image.
start_workload WD1 dest --size 32M --threads 2 --prefault --untouched-every 7 --zero-every 5
h_before=$(mem_state "$WD1" "$BASE" "$END")
try_attach() {
	"$CLIENT" --control "$d_SOCK" attach "$WD1" --image "$1" --range "$RANGE"
}
SZ=$(stat -c %s "$IMG")
expect_error "missing image" "No such file" try_attach "$T/none.img"
head -c $((SZ - 64)) "$IMG" >"$T/cut.img"
expect_error "truncated image" "truncated" try_attach "$T/cut.img"
cp "$IMG" "$T/bad.img"
flip_byte "$T/bad.img" 30
expect_error "header changed" "header checksum" try_attach "$T/bad.img"
cp "$IMG" "$T/bad.img"
flip_byte "$T/bad.img" $((SZ - 10))
expect_error "index changed" "checksum" try_attach "$T/bad.img"
expect_error "not an image" "bad magic" try_attach "$UFFDD"
expect_error "a directory" "not a regular file" try_attach "$T"
expect_error "--image with --from" "usage" "$CLIENT" --control "$d_SOCK" attach "$WD1" \
	--image "$IMG" --from "127.0.0.1:$s_PORT"
! grep -q 'anon_inode:\[userfaultfd\]' <(ls -l "/proc/$WD1/fd") ||
	fail "a refused attach left a userfaultfd in the target"
[ "$(mem_state "$WD1" "$BASE" "$END")" = "$h_before" ] ||
	fail "a refused attach changed the target's memory"
kill -9 "$WD1"
info "refused images left the target as it was"

# broken_restore NAME HOW: a restore (its bulk lane slowed) whose image is
# broken by HOW once the target runs: it fails, with lost pages poisoned
# and none read wrong.
start_daemon f --bulk-rate 2M
broken_restore() {
	local name=$1 how=$2
	cp "$T/served2.img" "$T/$name.img"
	start_workload WD1 dest --size 32M --threads 2 --prefault --untouched-every 7 \
		--zero-every 5 --sigbus-ok
	"$CLIENT" --control "$f_SOCK" attach "$WD1" --image "$T/$name.img" --range "$RANGE" \
		--wait >"$T/broken.out" 2>&1 &
	local apid=$!
	for _ in $(seq 600); do
		grep -q '^attached' "$T/broken.out" && break
		sleep 0.05
	done
	# Not attached in 30 s: what the client and the daemon were doing.
	grep -q '^attached' "$T/broken.out" ||
		fail "$name: attach: '$(cat "$T/broken.out")'; client $(proc_state "$apid" 2>/dev/null || echo gone); status: $("$CLIENT" --control "$f_SOCK" status 2>&1 | tail -3); daemon f: $(tail -8 "$T/f.log")"
	eval "$how"
	kill -USR1 "$WD1"
	if wait "$apid"; then
		fail "$name: the restore completed: $(cat "$T/broken.out")"
	fi
	grep -q "failed" "$T/broken.out" || fail "$name: $(cat "$T/broken.out")"
	for _ in $(seq 600); do
		grep -q "^verified" "$T/WD1.out" && break
		sleep 0.1
	done
	grep -q '^verified [0-9]* pages, 0 mismatches, [1-9][0-9]* lost' "$T/WD1.out" ||
		fail "$name: want no mismatch and lost pages: $(cat "$T/WD1.out" "$T/WD1.log" | tail -5)"
	info "$name: $(grep -m1 'failed' "$T/broken.out"); target: $(grep '^verified' "$T/WD1.out")"
	kill -9 "$WD1"
}
# The last 8 MiB of data are gone, and a byte in the middle is changed.
broken_restore truncated "truncate -s $((SZ / 2)) $T/truncated.img"
broken_restore corrupted "flip_byte $T/corrupted.img $((SZ / 2))"
grep -q "checksum mismatch" "$T/broken.out" || fail "corrupted: the reason does not say checksum: $(cat "$T/broken.out")"

# A restarted daemon has no image: the restore it finds in its state
# directory resumes, is told the ID is unknown, and fails loudly.
cp "$T/served2.img" "$T/restart.img"
start_workload WD1 dest --size 32M --threads 2 --prefault --untouched-every 7 \
	--zero-every 5 --sigbus-ok
"$CLIENT" --control "$f_SOCK" attach "$WD1" --image "$T/restart.img" --range "$RANGE" \
	>"$T/attach.out" || fail "restart: attach: $(cat "$T/attach.out")"
stop_daemon f
restart_daemon f
# The restore of WD1 alone: the restores that ended before the restart
# are listed too, as they ended.
mine() {
	"$CLIENT" --control "$f_SOCK" status --json 2>"$T/status.err" | python3 -c '
import json, sys
for m in json.load(sys.stdin):
    if m["pid"] == '"$WD1"':
        print(json.dumps(m))'
}
for _ in $(seq 100); do
	mine >"$T/status.json"
	grep -q '"state": "failed"' "$T/status.json" && break
	sleep 0.1
done
grep -q '"state": "failed".*unknown migration ID' "$T/status.json" ||
	fail "restart: the restore did not fail: $(cat "$T/status.json")"
grep -q '"pages_lost": [1-9]' "$T/status.json" || fail "restart: no page counted lost: $(cat "$T/status.json")"
kill -USR1 "$WD1"
for _ in $(seq 600); do
	grep -q "^verified" "$T/WD1.out" && break
	sleep 0.1
done
grep -q '^verified [0-9]* pages, 0 mismatches, [1-9][0-9]* lost' "$T/WD1.out" ||
	fail "restart: want no mismatch and lost pages: $(tail -3 "$T/WD1.out" "$T/WD1.log")"
info "restart: the restore failed loudly; target: $(grep '^verified' "$T/WD1.out")"
kill -9 "$WD1"
