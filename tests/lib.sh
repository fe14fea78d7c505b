# Shared helpers for integration tests and the demo. Sourced, not run.
# Every process, mount and swap device a test creates is registered here
# and removed by the EXIT trap, also when the test fails.
set -euo pipefail

B=${BUILDDIR:?BUILDDIR must name the build directory}
UFFDD=$B/daemon/uffdd
CLIENT=$B/client/uffd-client
WORKLOAD=$B/tests/workload
MEMHASH=$B/tests/memhash
T=$(mktemp -d /tmp/uffdd-test.XXXXXX)
PIDS=()
# Where daemons listen: loopback, or the two hosts of make_hosts.
src_ADDR=127.0.0.1
dst_ADDR=127.0.0.1
SRC_HOST_ADDR=10.231.0.1
DST_HOST_ADDR=10.231.0.2
src_STARTS=1
dst_STARTS=1
CLEANUPS=()
# Sanitizer builds: every report is seen and fails the test. LeakSanitizer
# is on (ASan's default) for the daemons, the client and every other
# sanitized program alike: a client that leaks exits non-zero. UBSan
# reports are fatal (the build has -fno-sanitize-recover as well). A death
# by ASan or LSan exits 66, by UBSan 67 (uffd-client's own statuses are 0,
# 1 and 2). What the caller set comes first, so that these win.
# Each daemon writes its ASan and LSan reports to $T/NAME.san.PID
# (run_daemon); stop_daemons checks them. Every other sanitized program
# writes them to $SAN/TAG.PROGRAM.PID: TAG is "run" for those a test runs
# itself, which cleanup reads (san_scan), and one of its own for each
# command run through checked, which reads them at once. $SAN is outside
# $T and open to all: a client run as another user must be able to write
# its report there. UBSan (GCC's runtime beside ASan) writes to stderr
# only, whatever log_path says: checked reads the command's output for it,
# and tests/run.sh the output of a test that passed.
SAN=$(mktemp -d /tmp/uffdd-san.XXXXXX)
chmod 1777 "$SAN"
SAN_N=0
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:handle_abort=1:exitcode=66:log_path=$SAN/run:log_exe_name=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1:exitcode=67"

# The daemons a test started: DAEMONS maps a running one's pid to its name,
# DAEMON_NAMES holds every name used, KILLED the pids kill_daemon killed.
# At the end (cleanup), and when stop_daemon or ensure_daemon stops one,
# each daemon still running gets SIGTERM and has DAEMON_STOP_TIMEOUT
# seconds to exit 0; its log and sanitizer reports must hold no report.
declare -A DAEMONS=() DAEMON_NAMES=() KILLED=() REPORTED=()
DAEMON_STOP_TIMEOUT=${DAEMON_STOP_TIMEOUT:-20}
DAEMON_PROBLEMS=()
# What ASan, LSan and UBSan reports say; the last, a sanitizer that could
# not write its report to log_path (it says so on stderr, and dies).
SAN_REPORT='ERROR: (Address|Leak|UndefinedBehavior|Memory|Thread)Sanitizer|SUMMARY: [A-Za-z]*Sanitizer|runtime error: |ERROR: Can.t open file'

# The parent of PID, while PID is there.
proc_ppid() { sed -e 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f2; }

# daemon_problem NAME PID TEXT: the test fails, and says TEXT last.
daemon_problem() { DAEMON_PROBLEMS+=("daemon $1 (pid $2): $3"); }

# daemon_check_reports NAME: a sanitizer report in NAME's log or report
# files is a problem; its first lines are shown. Both are read: ASan and
# LSan write to log_path, but UBSan (GCC's runtime beside ASan) writes to
# stderr, the log, whatever its log_path says.
daemon_check_reports() {
	local - name=$1 f line l
	set +e
	for f in "$T/$name.log" "$T/$name".san.*; do
		[ -f "$f" ] && [ -z "${REPORTED[$f]:-}" ] || continue
		line=$(grep -n -m1 -E "$SAN_REPORT" "$f" | cut -d: -f1)
		[ -n "$line" ] || continue
		REPORTED[$f]=1
		case $f in
		*.san.*) daemon_problem "$name" "${f##*.san.}" "sanitizer report in $f:" ;;
		*) DAEMON_PROBLEMS+=("daemon $name: sanitizer report in $f:") ;;
		esac
		while IFS= read -r l; do
			DAEMON_PROBLEMS+=("    $l")
		done < <(tail -n +"$line" "$f" | report_head)
		echo "--- $f: sanitizer report"
		tail -n +"$line" "$f" | head -n 300
	done
}

# The lines of a report (on stdin) that say most: its first line and, for
# LeakSanitizer, the first direct leak (indirect ones hang off a direct
# one; the first indirect one when there is none) and the summary;
# otherwise its first lines, the stack.
report_head() {
	awk '
		NR == 1 { print; next }
		/^(Direct|Indirect) leak/ {
			leak = 1
			if (kind == "" || (kind == "Indirect" && $1 == "Direct")) {
				kind = $1; n = 0; take = 1
			}
		}
		/^$/ { take = 0 }
		take && n < 10 { block[n++] = $0 }
		/^SUMMARY:/ && leak { summary = $0 }
		!leak && NF && m < 11 { rest[m++] = $0 }
		END {
			if (leak) {
				for (i = 0; i < n; i++) print block[i]
				print summary
			} else {
				for (i = 0; i < m; i++) print rest[i]
			}
		}
	'
}

# daemon_stop PID...: SIGCONT and SIGTERM to each daemon still running (not
# those kill_daemon killed), then each is waited for, all within
# DAEMON_STOP_TIMEOUT seconds; one still running then is killed. Any but
# exit status 0 is a problem.
daemon_stop() {
	local - pid name rc deadline when
	local -A early=()
	set +e # a test's set -e must not end the stop half way
	for pid in "$@"; do
		[ -z "${KILLED[$pid]:-}" ] || continue
		# Our own child only: the pid of one that exited may be reused.
		if [ "$(proc_ppid "$pid")" != "$BASHPID" ] ||
			[ "$(proc_state "$pid" 2>/dev/null)" = Z ]; then
			early[$pid]=1
			continue
		fi
		kill -CONT "$pid" 2>/dev/null
		kill -TERM "$pid" 2>/dev/null
	done
	deadline=$((SECONDS + DAEMON_STOP_TIMEOUT))
	for pid in "$@"; do
		name=${DAEMONS[$pid]:-?}
		unset "DAEMONS[$pid]"
		[ -z "${KILLED[$pid]:-}" ] || continue
		while [ "$(proc_ppid "$pid")" = "$BASHPID" ] &&
			[ "$(proc_state "$pid" 2>/dev/null)" != Z ] &&
			[ "$SECONDS" -lt "$deadline" ]; do
			sleep 0.05
		done
		if [ "$(proc_ppid "$pid")" = "$BASHPID" ] &&
			[ "$(proc_state "$pid" 2>/dev/null)" != Z ]; then
			kill -9 "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			daemon_problem "$name" "$pid" "still running $DAEMON_STOP_TIMEOUT s after SIGTERM: killed"
			continue
		fi
		wait "$pid" 2>/dev/null
		rc=$?
		when="at SIGTERM"
		[ -z "${early[$pid]:-}" ] || when="before the end of the test"
		if [ "$rc" = 127 ]; then
			daemon_problem "$name" "$pid" "exit status unknown: the test reaped it (stop a daemon with stop_daemon or kill_daemon)"
		elif [ "$rc" -gt 128 ]; then
			daemon_problem "$name" "$pid" "killed by signal $((rc - 128)) (SIG$(kill -l $((rc - 128)) 2>/dev/null)) $when"
		elif [ "$rc" != 0 ]; then
			daemon_problem "$name" "$pid" "exited with status $rc $when"
		fi
	done
}

# stop_daemon NAME: stops daemon NAME as cleanup does; fails the test at
# once if it broke the rule.
stop_daemon() {
	local name=$1 pid pids=()
	for pid in "${!DAEMONS[@]}"; do
		[ "${DAEMONS[$pid]}" = "$name" ] && pids+=("$pid")
	done
	[ ${#pids[@]} -eq 0 ] || daemon_stop "${pids[@]}"
	daemon_check_reports "$name"
	[ ${#DAEMON_PROBLEMS[@]} -eq 0 ] || fail "${DAEMON_PROBLEMS[0]}"
}

# stop_daemons: every daemon stopped and checked (cleanup).
stop_daemons() {
	local name
	[ ${#DAEMONS[@]} -eq 0 ] || daemon_stop "${!DAEMONS[@]}"
	for name in "${!DAEMON_NAMES[@]}"; do
		daemon_check_reports "$name"
	done
}

cleanup() {
	local rc=$?
	set +e
	# The daemons first, while the processes they serve are still there:
	# shutdown must be clean in every state.
	stop_daemons
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null
		while kill -0 "$p" 2>/dev/null && [ "$(proc_state "$p" 2>/dev/null)" != Z ]; do
			sleep 0.02
		done
	done
	for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do
		eval "${CLEANUPS[$i]}"
	done
	san_scan
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
		for f in "$T"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $f"
			tail -n 30 "$f"
		done
	fi
	# Last, where run.sh shows it.
	if [ ${#DAEMON_PROBLEMS[@]} -gt 0 ]; then
		for p in "${DAEMON_PROBLEMS[@]}"; do
			echo "FAIL: $p"
		done
		rc=1
	fi
	[ -n "${KEEP_T:-}" ] || rm -rf "$T" "$SAN"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# skip REASON: the whole test is skipped. skip_part REASON: a part of it
# is, and the test goes on. Either fails the test in tests/run.sh unless
# tests/allowed-skips lists it: say exactly what was left out, and why.
skip() { echo "SKIP: $*"; exit 77; }
skip_part() { echo "SKIP-PART: $*"; }
fail() { echo "FAIL: $*"; exit 1; }
info() { echo "== $*"; }
need_root() { [ "$(id -u)" = 0 ] || skip "needs root (ptrace, userfaultfd in other processes)"; }
# need_engine_user: the user uffdd, which a confined engine runs as, made
# by the project's sysusers.d file as a package install makes it.
need_engine_user() {
	id uffdd >/dev/null 2>&1 && return
	command -v systemd-sysusers >/dev/null || skip "systemd-sysusers missing (Debian package systemd) to make the user uffdd"
	systemd-sysusers "$SRC/systemd/uffdd.sysusers" >"$T/sysusers.out" 2>&1 ||
		fail "systemd-sysusers: $(cat "$T/sysusers.out")"
	id uffdd >/dev/null 2>&1 || fail "systemd-sysusers did not make the user uffdd"
}
on_cleanup() { CLEANUPS+=("$*"); }

# checked OUT CMD...: runs CMD (a sanitized program, or setpriv, ip netns
# exec, timeout or a shell function that runs one) with its stdout and
# stderr in OUT and its ASan and LSan reports in files of its own in $SAN,
# and returns CMD's exit status, whatever it is: the caller decides
# whether CMD had to fail. But a sanitizer report (in those files, or in
# OUT for UBSan), a sanitizer's exit status (66, 67) or a crash (SIGSEGV,
# SIGABRT, SIGBUS, SIGFPE, SIGILL) fails the test there and then, naming
# SAN_WHO (the caller's name for what CMD is, else CMD itself).
checked() {
	local out=$1 tag rc=0
	shift
	tag=c${BASHPID}_$((SAN_N += 1))
	ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$SAN/$tag "$@" >"$out" 2>&1 || rc=$?
	san_check "${SAN_WHO:-$*}" "$tag" "$rc" "$out"
	return "$rc"
}

# must WHO OUT CMD...: CMD, run by checked, must exit 0.
must() {
	local who=$1 out=$2 rc=0
	shift 2
	SAN_WHO=$who checked "$out" "$@" || rc=$?
	[ "$rc" = 0 ] || fail "$who: exit $rc: $(cat "$out")"
}

# san_check WHO TAG RC [FILE...]: what ran with log_path $SAN/TAG left no
# report in $SAN/TAG.* nor in FILE..., and RC is neither a sanitizer's
# exit status nor a crash; else the test fails (san_fail).
san_check() {
	local - who=$1 tag=$2 rc=$3 f line
	shift 3
	set +e
	for f in "$SAN/$tag".* "$@"; do
		[ -f "$f" ] || continue
		line=$(grep -n -m1 -E "$SAN_REPORT" "$f" | cut -d: -f1)
		[ -n "$line" ] && san_fail "$who" "$f" "$line"
	done
	case $rc in
	66 | 67) san_fail "$who" "" "exit status $rc, a sanitizer's, but no report found" ;;
	132 | 134 | 135 | 136 | 139) san_fail "$who" "" "crashed: SIG$(kill -l $((rc - 128)))" ;;
	esac
}

# san_fail WHO FILE LINE: the report in FILE from line LINE (or, with no
# FILE, the text LINE) fails the test. It is shown at once and named last
# by cleanup, also when found in a subshell ($(...)), which exits alone.
san_fail() {
	local who=$1 f=$2 line=$3 base prog
	if [ -z "$f" ]; then
		echo "$who: $line" >>"$SAN/.problems"
		exit 1
	fi
	case $f in
	"$SAN"/*)
		base=${f##*/} prog=${f##*/}
		prog=${prog%.*}
		prog=${prog#*.}
		echo "$who: sanitizer report of $prog (pid ${base##*.}) in $f:"
		;;
	*) echo "$who: sanitizer report in its output ($f):" ;;
	esac >>"$SAN/.problems"
	tail -n +"$line" "$f" | report_head | sed 's/^/    /' >>"$SAN/.problems"
	echo "$f" >>"$SAN/.reported"
	{
		echo "--- $f: sanitizer report"
		tail -n +"$line" "$f" | head -n 300
	} >&2
	exit 1
}

# san_scan: what checked found in a subshell, and every report in $SAN
# that nothing read: those of programs run outside checked (a test's own
# uffd-client calls, uffdd run by hand); they fail the test (cleanup).
san_scan() {
	local - f base prog line l
	set +e
	if [ -f "$SAN/.problems" ]; then
		while IFS= read -r l; do
			DAEMON_PROBLEMS+=("$l")
		done <"$SAN/.problems"
	fi
	for f in "$SAN"/*; do
		[ -s "$f" ] || continue
		grep -qxF -- "$f" "$SAN/.reported" 2>/dev/null && continue
		base=${f##*/} prog=${f##*/}
		prog=${prog%.*}
		prog=${prog#*.}
		line=$(grep -n -m1 -E "$SAN_REPORT" "$f" | cut -d: -f1)
		DAEMON_PROBLEMS+=("$prog (pid ${base##*.}): sanitizer report in $f:")
		while IFS= read -r l; do
			DAEMON_PROBLEMS+=("    $l")
		done < <(tail -n +"${line:-1}" "$f" | report_head)
		echo "--- $f: sanitizer report"
		tail -n +"${line:-1}" "$f" | head -n 300
	done
}

# san_kind FILE: which sanitizers FILE is built with: "asan ubsan", one,
# or nothing. GCC links their runtimes as libraries (readelf -d, quick);
# else their symbols say (nm; awk reads all of its output: a reader that
# stops early kills nm with SIGPIPE, and pipefail turns that into "none").
san_kind() {
	local k
	k=$(readelf -d "$1" 2>/dev/null | awk '/NEEDED.*\[libasan\./ { a = 1 } /NEEDED.*\[libubsan\./ { u = 1 }
		END { printf "%s%s%s\n", a ? "asan" : "", a && u ? " " : "", u ? "ubsan" : "" }')
	[ -n "$k" ] || k=$(nm "$1" 2>/dev/null | awk '/__asan_init/ { a = 1 } /__ubsan_handle_/ { u = 1 }
		END { printf "%s%s%s\n", a ? "asan" : "", a && u ? " " : "", u ? "ubsan" : "" }')
	echo "$k"
}
# The build kind tests/run.sh declares (UFFDD_BUILD_KIND) is checked, not
# trusted: a "sanitized" build whose daemon, client or sanfake lacks ASan
# or UBSan (a build directory configured without --enable-sanitizers, say)
# would pass every check of reports without ever making one. SANITIZED is
# 1 on a sanitized build (as declared, or as found when nothing is).
case ${UFFDD_BUILD_KIND:-} in
sanitized)
	for san_f in "$UFFDD" "$CLIENT" "$B/tests/sanfake"; do
		[ "$(san_kind "$san_f")" = "asan ubsan" ] ||
			fail "the sanitized build lacks AddressSanitizer or UBSan in $san_f ($(san_kind "$san_f" | sed 's/^$/neither/'); configure --enable-sanitizers)"
	done
	SANITIZED=1
	;;
plain)
	[ -z "$(san_kind "$UFFDD")" ] || fail "the plain build has sanitizers in $UFFDD"
	SANITIZED=0
	;;
'')
	SANITIZED=0
	[ -z "$(san_kind "$UFFDD")" ] || SANITIZED=1
	;;
*) fail "UFFDD_BUILD_KIND=$UFFDD_BUILD_KIND: want sanitized or plain" ;;
esac

# new_port VAR: VAR is set to a port for a daemon to listen on, below the
# kernel's ephemeral range (32768 and up, so that no outgoing connection
# takes it between a daemon's restarts), and not handed out before in
# this test (USED_PORTS). Nothing probes it: the daemon binds it, and
# run_daemon draws another when another process has it (EADDRINUSE).
declare -A USED_PORTS=()
new_port() {
	local _port
	while :; do
		_port=$((20000 + RANDOM % 12000))
		[ -z "${USED_PORTS[$_port]:-}" ] && break
	done
	USED_PORTS[$_port]=1
	eval "$1=$_port"
}

# A TCP port on 127.0.0.1 that nothing listened on a moment ago, below
# the ephemeral range and not one of USED_PORTS: only for what must not
# get as far as binding or connecting (a refused daemon, say). A port
# that must stay unused is held by hold_port.
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 12000))
		[ -z "${USED_PORTS[$p]:-}" ] || continue
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	fail "no free port"
}

# hold_port VAR: VAR is set to a port on 127.0.0.1 that is bound but not
# listening, held so until the end of the test: a connection to it is
# refused, whatever else runs on the machine.
hold_port() {
	local _port
	python3 -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
sys.stdout.close()
time.sleep(86400)' >"$T/held-port" &
	PIDS+=($!)
	for _ in $(seq 100); do
		_port=$(cat "$T/held-port")
		[ -n "$_port" ] && break
		sleep 0.05
	done
	[ -n "$_port" ] || fail "hold_port: no port"
	eval "$1=$_port"
}

# listen_ports PID...: the TCP ports processes PID... listen on (ss), one a
# line (a daemon's: listen_ports $(daemon_pids NAME); its engine listens).
listen_ports() {
	local p
	for p in "$@"; do
		ss -Hltnp | awk -v pid="pid=$p," 'index($0, pid) { n = split($4, a, ":"); print a[n] }'
	done | sort -un
}

# A throwaway PKI under $T/pki, made with the openssl CLI: make_ca NAME
# creates NAME.crt/NAME.key (a CA); issue CA NAME SAN [openssl-ca args...]
# signs NAME.crt/NAME.key for SAN (e.g. "IP:127.0.0.1"), valid for both
# server and client use. Extra args go to `openssl ca` (-startdate...).
PKI=$T/pki
make_ca() {
	local ca=$1
	command -v openssl >/dev/null || skip "openssl CLI missing (Debian package openssl)"
	mkdir -p "$PKI/$ca.db"
	: >"$PKI/$ca.db/index.txt"
	echo 01 >"$PKI/$ca.db/serial"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$PKI/$ca.key" -out "$PKI/$ca.crt" -days 2 \
		-subj "/CN=uffdd test CA $ca" 2>/dev/null ||
		fail "openssl req: cannot make CA $ca"
	cat >"$PKI/$ca.cnf" <<-EOF
		[ca]
		default_ca = tca
		[tca]
		dir = $PKI/$ca.db
		database = \$dir/index.txt
		new_certs_dir = \$dir
		serial = \$dir/serial
		default_md = sha256
		default_days = 2
		unique_subject = no
		policy = pol
		[pol]
		commonName = supplied
		[leaf]
		basicConstraints = CA:FALSE
		keyUsage = digitalSignature
		extendedKeyUsage = serverAuth, clientAuth
		subjectAltName = \${ENV::SAN}
	EOF
}
issue() {
	local ca=$1 name=$2 san=$3
	shift 3
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$PKI/$name.key" -out "$PKI/$name.csr" \
		-subj "/CN=$name" 2>/dev/null || fail "openssl req: $name"
	SAN=$san openssl ca -batch -notext -config "$PKI/$ca.cnf" \
		-cert "$PKI/$ca.crt" -keyfile "$PKI/$ca.key" -extensions leaf \
		-in "$PKI/$name.csr" -out "$PKI/$name.crt" "$@" 2>"$PKI/$name.err" ||
		fail "openssl ca: $name: $(cat "$PKI/$name.err")"
}
# The default PKI: CA "ca" and one certificate "node" for loopback that
# every test daemon shows, both as server and as client.
default_pki() {
	[ -f "$PKI/node.crt" ] && return
	make_ca ca
	issue ca node "IP:127.0.0.1,IP:::1,DNS:localhost,IP:$SRC_HOST_ADDR,IP:$DST_HOST_ADDR"
}

# Peer connections use TLS 1.3 unless UFFDD_TEST_INSECURE=1 (plaintext on
# loopback, --insecure) or the test passes --insecure itself.
tls_args() {
	local a
	for a in "$@"; do
		[ "$a" = --insecure ] && return
	done
	if [ "${UFFDD_TEST_INSECURE:-0}" = 1 ]; then
		echo --insecure
		return
	fi
	default_pki
	echo --ca "$PKI/ca.crt" --cert "$PKI/node.crt" --key "$PKI/node.key"
}

# start_daemon NAME [UFFDD ARGS...]: starts uffdd (inside $NETNS when set);
# sets NAME_PID, NAME_PORT and NAME_SOCK. restart_daemon NAME starts it
# again with the same port, socket, state directory and arguments.
start_daemon() {
	local name=$1 port
	shift
	new_port port
	eval "${name}_PORT=$port"
	eval "${name}_SOCK=$T/$name.sock"
	eval "${name}_ARGS=\"\$*\""
	eval "${name}_STARTS=\${${name}_STARTS:-1}"
	run_daemon "$name" "$@"
}

# run_daemon NAME ARGS...: uffdd NAME started on NAME_PORT, up to its
# NAME_STARTS-th "ready". Another process may have bound that port since
# it was drawn: then it is drawn again, or, for a restart (RUN_SAME_PORT,
# as restart_daemon sets it: the peers know that port), tried again for a
# few seconds.
run_daemon() {
	local name=$1 port tls ns addr pid try lines p keep
	shift
	tls=$(tls_args "$@")
	# An empty configuration file, so that the machine's
	# /etc/uffdd/uffdd.conf cannot change a test; ARGS may name another.
	: >"$T/empty.conf"
	# shellcheck disable=SC2086
	ns=${NETNS:-}
	addr=127.0.0.1
	if [ -n "${HOSTS:-}" ]; then
		case $name in
		src*) ns=$NS_SRC addr=$SRC_HOST_ADDR ;;
		*) ns=$NS_DST addr=$DST_HOST_ADDR ;;
		esac
	fi
	for try in $(seq 10); do
		port=$(eval echo "\$${name}_PORT")
		lines=0
		[ ! -f "$T/$name.log" ] || lines=$(wc -l <"$T/$name.log")
		ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$T/$name.san:log_exe_name=0 \
			UBSAN_OPTIONS=$UBSAN_OPTIONS:log_path=$T/$name.san \
			${ns:+ip netns exec "$ns"} "$UFFDD" -f --config "$T/empty.conf" \
			$tls --listen "$addr:$port" --control "$T/$name.sock" \
			--state-dir "$T/$name.state" \
			${UFFDD_TEST_ENGINE_USER:+--engine-user "$UFFDD_TEST_ENGINE_USER"} \
			"$@" >>"$T/$name.log" 2>&1 &
		pid=$!
		daemon_started "$name" $pid
		eval "${name}_PID=$pid"
		for _ in $(seq 200); do
			[ -S "$T/$name.sock" ] &&
				[ "$(grep -c 'ready: control' "$T/$name.log")" -ge "$(eval echo "\$${name}_STARTS")" ] && return
			exited "$pid" && break
			sleep 0.05
		done
		# Gone before it was ready, because the port was taken: not a
		# daemon that broke a rule. Its log lines stay, and so do its
		# sanitizer reports, which stop_daemons reads.
		exited "$pid" &&
			grep -q 'Address already in use' <(tail -n +$((lines + 1)) "$T/$name.log") || break
		wait "$pid" || true
		unset "DAEMONS[$pid]"
		keep=()
		for p in "${PIDS[@]}"; do
			[ "$p" = "$pid" ] || keep+=("$p")
		done
		PIDS=("${keep[@]}")
		info "uffdd $name: port $port in use by another process (try $try)"
		if [ -n "${RUN_SAME_PORT:-}" ]; then
			sleep 0.5
		else
			new_port port
			eval "${name}_PORT=$port"
		fi
	done
	fail "uffdd $name did not start: $(cat "$T/$name.log")"
}

# exited PID: our child PID has exited (a zombie, or reaped by the shell).
exited() { ! kill -0 "$1" 2>/dev/null || [ "$(proc_state "$1" 2>/dev/null)" = Z ]; }

# daemon_started NAME PID: a daemon a test started itself (logging to
# $T/NAME.log) is stopped and checked as run_daemon's are.
daemon_started() {
	PIDS+=("$2")
	DAEMONS[$2]=$1
	DAEMON_NAMES[$1]=1
}

restart_daemon() {
	local name=$1
	# shellcheck disable=SC2046
	eval "${name}_STARTS=\$((${name}_STARTS + 1))"
	eval "RUN_SAME_PORT=1 run_daemon $name \$${name}_ARGS"
}

# ensure_daemon NAME [ARGS...]: a running daemon started with ARGS,
# started (or restarted with the new arguments) when there is none.
ensure_daemon() {
	local name=$1 pid args
	shift
	pid=$(eval echo "\${${name}_PID:-}")
	args=$(eval echo "\${${name}_ARGS:-}")
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		[ "$args" = "$*" ] && return
		stop_daemon "$name"
		rm -f "$T/$name.sock"
		: >"$T/$name.log"
	fi
	start_daemon "$name" "$@"
}

# state_dir NAME: where daemon NAME's engine keeps its state files: its
# --state-dir ($T/NAME.state unless its arguments name another), and
# engine/ in that when the engine is confined (--engine-user).
state_dir() {
	local dir=$T/$1.state user=${UFFDD_TEST_ENGINE_USER:-} a prev=
	for a in $(eval echo "\${${1}_ARGS:-}"); do
		case $prev in
		--state-dir) dir=$a ;;
		--engine-user) user=$a ;;
		esac
		prev=$a
	done
	[ -z "$user" ] || dir=$dir/engine
	echo "$dir"
}

# engine_pid NAME: the pid of daemon NAME's engine, the unprivileged
# process that runs its migrations (docs/privsep.md); daemon_pids NAME:
# both of its processes, the privileged part first.
# (A daemon with no engine, such as tests/sanfake, has none: "".)
# procs_of PID: the same for a daemon's pid. A renice, a CPU placement or
# a CPU count takes in both (an engine forked later inherits the first
# two from the privileged part); cpu_s PID: their user+sys CPU seconds.
engine_pid() { { pgrep -P "$(eval echo "\$${1}_PID")" || true; } | head -n 1; }
daemon_pids() { procs_of "$(eval echo "\$${1}_PID")"; }
procs_of() { echo "$1" $({ pgrep -P "$1" || true; } | head -n 1); }
cpu_s() {
	local p
	for p in $(procs_of "$1"); do
		sed -e 's/^.*) //' "/proc/$p/stat" 2>/dev/null
	done | awk -v hz="$(getconf CLK_TCK)" '{t += $12 + $13} END {printf "%.3f", t / hz}'
}

# wait_log NAME PATTERN COUNT: until NAME's log has COUNT lines matching.
wait_log() {
	for _ in $(seq 200); do
		[ "$(grep -c -- "$2" "$T/$1.log")" -ge "$3" ] && return
		sleep 0.05
	done
	fail "$1 never logged '$2' $3 times: $(tail -n 5 "$T/$1.log")"
}

# engine_holds_peers NAME PORT: daemon NAME's engine, not its privileged
# part, holds the established peer connections of port PORT.
engine_holds_peers() {
	local eng priv
	eng=$(engine_pid "$1")
	priv=$(eval echo "\$${1}_PID")
	ss -tnp state established "( sport = :$2 or dport = :$2 )" >"$T/$1.ss"
	grep -q "pid=$eng," "$T/$1.ss" || fail "$1: the engine ($eng) holds no peer connection: $(cat "$T/$1.ss")"
	! grep -q "pid=$priv," "$T/$1.ss" || fail "$1: the privileged part holds a peer connection: $(cat "$T/$1.ss")"
}

# kill_daemon NAME: SIGKILL, as a crash would. Its exit status is not
# checked at the end, its log is.
kill_daemon() {
	local pid eng
	pid=$(eval echo "\$${1}_PID")
	eng=$(engine_pid "$1")
	KILLED[$pid]=1
	kill -9 "$pid" $eng
	wait "$pid" 2>/dev/null || true
	# The engine dies with it (PR_SET_PDEATHSIG): gone before a restart.
	for _ in $(seq 250); do
		[ -z "$eng" ] || [ "$(proc_state "$eng" 2>/dev/null || echo Z)" = Z ] && break
		sleep 0.02
	done
}

# cut_link PORT / heal_link: the cable is pulled (no reset, no error, just
# silence) and put back: between make_hosts' hosts the source's veth goes
# down; inside a single $NETNS every packet of PORT is dropped (nftables).
cut_link() {
	if [ -n "${HOSTS:-}" ]; then
		ip -n "$NS_SRC" link set "$VETH_SRC" down
		return
	fi
	ip netns exec "$NETNS" nft -f - <<NFT
table inet uffdd_cut {
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport $1 drop
		tcp sport $1 drop
	}
}
NFT
}
heal_link() {
	if [ -n "${HOSTS:-}" ]; then
		ip -n "$NS_SRC" link set "$VETH_SRC" up
		return
	fi
	ip netns exec "$NETNS" nft delete table inet uffdd_cut
}

# make_hosts: a "source host" and a "destination host", two network
# namespaces joined by a veth pair (SRC_HOST_ADDR, DST_HOST_ADDR); daemons
# named src* run on the first, the others on the second, and src_ADDR /
# dst_ADDR say where they listen. Removed at exit.
make_hosts() {
	command -v ip >/dev/null || skip "ip (iproute2) missing"
	NS_SRC=uffdd-src-$$
	NS_DST=uffdd-dst-$$
	VETH_SRC=uS$$
	ip netns add "$NS_SRC" || skip "cannot create a network namespace"
	on_cleanup "ip netns del $NS_SRC 2>/dev/null"
	ip netns add "$NS_DST" || skip "cannot create a network namespace"
	on_cleanup "ip netns del $NS_DST 2>/dev/null"
	ip link add "$VETH_SRC" netns "$NS_SRC" type veth peer name "uD$$" \
		netns "$NS_DST" || skip "cannot create a veth pair"
	ip -n "$NS_SRC" addr add "$SRC_HOST_ADDR/24" dev "$VETH_SRC"
	ip -n "$NS_DST" addr add "$DST_HOST_ADDR/24" dev "uD$$"
	for ns in "$NS_SRC" "$NS_DST"; do
		ip -n "$ns" link set lo up
	done
	ip -n "$NS_SRC" link set "$VETH_SRC" up
	ip -n "$NS_DST" link set "uD$$" up
	HOSTS=1
	src_ADDR=$SRC_HOST_ADDR
	dst_ADDR=$DST_HOST_ADDR
}

# make_netns: a private network namespace with loopback up, removed at exit.
make_netns() {
	command -v ip >/dev/null || skip "ip (iproute2) missing"
	NETNS=uffdd-test-$$
	ip netns add "$NETNS" || skip "cannot create a network namespace"
	on_cleanup "ip netns del $NETNS 2>/dev/null"
	on_cleanup "ip netns exec $NETNS nft delete table inet uffdd_cut 2>/dev/null"
	ip netns exec "$NETNS" ip link set lo up
}

# unit_nice: the nice value the unit runs the daemon at (Nice= in
# systemd/uffdd.service, 0 if none). as_nice N NAME...: daemons NAME... at
# nice N. as_unit NAME...: at the unit's value, as the service runs them.
unit_nice() {
	local n
	n=$(sed -n 's/^Nice=//p' "$SRC/systemd/uffdd.service")
	echo "${n:-0}"
}
# as_nice N NAME...: NAME's processes (daemon_pids: a daemon's engine
# too) at nice N, as the unit's Nice= puts the whole service.
as_nice() {
	local d n=$1
	shift
	for d in "$@"; do
		renice -n "$n" -p $(daemon_pids "$d") >/dev/null
	done
}
as_unit() { as_nice "$(unit_nice)" "$@"; }
# bench_nice NAME...: a benchmark's daemons at the unit's nice value, as
# the service runs them, or at BENCH_NICE; says which, once.
bench_nice() {
	as_nice "${BENCH_NICE:-$(unit_nice)}" "$@"
	[ -n "${BENCH_NICE_SAID:-}" ] && return
	BENCH_NICE_SAID=1
	info "daemons at nice ${BENCH_NICE:-$(unit_nice)} (BENCH_NICE overrides)"
}

# start_workload VAR MODE ARGS...: starts a workload, waits for "ready".
start_workload() {
	local var=$1 mode=$2
	shift 2
	# A previous run's "ready" must not be read as this one's.
	rm -f "$T/$var.out" "$T/$var.log"
	"$WORKLOAD" "$mode" "$@" >"$T/$var.out" 2>"$T/$var.log" &
	PIDS+=($!)
	disown $! # the daemon kills it: no job-control chatter about that
	eval "$var=$!"
	for _ in $(seq 600); do
		grep -q "^ready" "$T/$var.out" 2>/dev/null && return
		kill -0 "${!var}" 2>/dev/null || fail "workload $var died: $(cat "$T/$var.log")"
		sleep 0.05
	done
	fail "workload $var not ready"
}

# start_holder_pair ARGS...: a writer WS (workload source ARGS, a shared
# kind) and its holder H, a process of its own mapping the same memory
# 1 TiB higher (--sibling holder), once it has moved it there: the
# holder of a guest's RAM and QEMU, in small.
start_holder_pair() {
	local moved
	start_workload WS source "$@" --sibling holder
	H=$(sed -n 's/^sibling //p' "$T/WS.out")
	[ -n "$H" ] || fail "workload WS started no holder: $(cat "$T/WS.out")"
	moved=$(printf '%x-' $((0x500000000000 + 0x10000000000)))
	for _ in $(seq 100); do
		grep -q "^$moved" "/proc/$H/maps" && return
		sleep 0.02
	done
	fail "holder $H did not move its mapping: $(cat "$T/WS.log")"
}

# start_daemons_commit_held MS: daemons src and dst, the source holding
# each COMMIT back MS ms after the destination is complete (the test
# knob UFFDD_TEST_COMMIT_DELAY_MS): a window after go in which a test
# acts before the migration is committed.
start_daemons_commit_held() {
	UFFDD_TEST_COMMIT_DELAY_MS=$1
	export UFFDD_TEST_COMMIT_DELAY_MS
	start_daemon src
	unset UFFDD_TEST_COMMIT_DELAY_MS
	start_daemon dst
}

# wait_stopped PID: until PID is in the stopped state (T); fails after 1 s.
wait_stopped() {
	for _ in $(seq 100); do
		[ "$(proc_state "$1")" = T ] && return
		sleep 0.01
	done
	fail "process $1 did not stop"
}

# usr2_said VAR PATTERN: workload VAR sent SIGUSR2 (what it does on one:
# --swap-on-usr2, --bypass-on-usr2), until a line of its output matches
# PATTERN; fails after 2 s.
usr2_said() {
	kill -USR2 "${!1}"
	for _ in $(seq 100); do
		grep -q "$2" "$T/$1.out" && return
		sleep 0.02
	done
	fail "workload $1 did not say '$2' after SIGUSR2: $(cat "$T/$1.log")"
}

# precopy_ready DAEMON ID: until DAEMON's pre-copy ID says its rounds
# converged (status precopy_ready); fails after 30 s.
precopy_ready() {
	local sock="${1}_SOCK"
	for _ in $(seq 300); do
		"$CLIENT" --control "${!sock}" status "$2" --json |
			grep -q '"precopy_ready":true' && return
		sleep 0.1
	done
	fail "pre-copy $2 never ready"
}

# tracked_go WHO ARGS...: the writer of a holder pair (start_holder_pair
# ARGS: WS writes, its holder H is exported) pre-copied from src to a
# dest workload WD with --track-unstopped WS, ready, WS stopped as QEMU
# stops before the switchover, and go. Uses SIZE, HOLD, HRANGE, BASE,
# RANGE; sets ID. WS stays stopped.
tracked_go() {
	local who=$1
	shift
	start_holder_pair "$@"
	start_workload WD dest --kind memfd --size "$SIZE" --threads 2
	ID=$("$CLIENT" --control "$src_SOCK" export "$H" --deferred --precopy \
		--keep-source --range "$HRANGE" --track-unstopped "$WS") ||
		fail "$who: export failed"
	"$CLIENT" --control "$dst_SOCK" attach "$WD" \
		--from "127.0.0.1:$src_PORT" --id "$ID" --range "$RANGE" \
		--map "$(printf '%x:%x' $((HOLD)) $((BASE)))" >"$T/attach.out" ||
		fail "$who: attach: $(cat "$T/attach.out")"
	precopy_ready src "$ID"
	kill -STOP "$WS"
	wait_stopped "$WS"
	"$CLIENT" --control "$src_SOCK" go "$ID" >"$T/go.out" 2>&1 ||
		fail "$who: go: $(cat "$T/go.out")"
}

# src_hash VAR PID START END [--poke-every K]: VAR is set to the SHA-256
# of the pages of source PID present now, read by memhash --present: no
# page that is not present is read, so the hash swaps nothing in and maps
# no zero page, and the source daemon finds what it would have found
# without it (memhash fails if a page came in meanwhile). Which pages they
# were goes to $T/VAR.map, for dst_hash; SRC_PRESENT, SRC_SWAPPED and
# SRC_NONE hold pagemap's counts at the hash.
src_hash() {
	local _var=$1 _h
	shift
	_h=$("$MEMHASH" --present "$T/$_var.map" "$@" 2>"$T/$_var.pagemap") ||
		fail "memhash --present $*: $(cat "$T/$_var.pagemap")"
	read -r _ SRC_PRESENT _ SRC_SWAPPED _ SRC_NONE <"$T/$_var.pagemap"
	eval "$_var=\$_h"
}
# dst_hash VAR PID START END [--zero-absent]: the SHA-256 of the pages of
# PID that were present in src_hash VAR's source, in its order: the two
# compare. --zero-absent: those that were neither present nor swapped
# there must read as zeros (for destinations that do not check
# themselves).
dst_hash() { "$MEMHASH" --map "$T/$1.map" "${@:2}"; }
# mem_state PID START END: a process's memory, read without changing it:
# the hash of its present pages, and which pages are present.
mem_state() {
	"$MEMHASH" --present "$T/state.map" "$@" 2>/dev/null &&
		sha256sum <"$T/state.map" | cut -c1-16
}

# paced_migration SRC DST SIZE BASE [DEST ARGS...]: a migration from
# daemon SRC to daemon DST that lasts seconds (the destination's 4 threads
# touch a page each 1.5 ms), for tests that break something under it. Sets
# ID, RANGE, M_BASE, M_END and H_SRC (the frozen source's hash, src_hash);
# paced_finish checks the end.
paced_migration() {
	local s=$1 d=$2 size=$3 ssock dsock addr port
	M_BASE=$4
	shift 4
	ssock=$(eval echo "\$${s}_SOCK")
	dsock=$(eval echo "\$${d}_SOCK")
	addr=$(eval echo "\${${s}_ADDR:-127.0.0.1}")
	port=$(eval echo "\$${s}_PORT")
	M_END=$(printf '0x%x' $((M_BASE + $(numfmt --from=iec "$size"))))
	RANGE=$(printf '%x-%x' "$M_BASE" "$M_END")
	start_workload WS source --size "$size" --threads 2 --base "$M_BASE"
	start_workload WD dest --size "$size" --threads 4 --pace-us 1500 \
		--prefault --base "$M_BASE" "$@"
	must "paced_migration: export" "$T/export.out" \
		"$CLIENT" --control "$ssock" export "$WS" --range "$RANGE"
	ID=$(cat "$T/export.out")
	src_hash H_SRC "$WS" "$M_BASE" "$M_END"
	must "paced_migration: attach" "$T/attach.out" "$CLIENT" --control "$dsock" \
		attach "$WD" --from "$addr:$port" --id "$ID" --range "$RANGE"
	kill -USR1 "$WD"
}

# paced_finish DST: the migration completes, byte for byte.
paced_finish() {
	local dsock
	dsock=$(eval echo "\$${1}_SOCK")
	must "paced_finish: wait" "$T/wait.out" \
		"$CLIENT" --control "$dsock" wait "$ID" --timeout 300
	wait_verified WD
	[ "$(dst_hash H_SRC "$WD" "$M_BASE" "$M_END")" = "$H_SRC" ] ||
		fail "destination differs from the source"
}

# anon_huge_kb PID START END: kB of transparent huge pages PID has mapped
# in the mappings that overlap START-END (AnonHugePages in smaps; reading
# smaps changes nothing).
anon_huge_kb() {
	local lo=$(($2)) hi=$(($3)) k v in=0 kb=0
	while read -r k v _; do
		if [[ $k =~ ^([0-9a-f]+)-([0-9a-f]+)$ ]]; then
			in=$((16#${BASH_REMATCH[1]} < hi && 16#${BASH_REMATCH[2]} > lo))
		elif [ "$k" = AnonHugePages: ] && [ "$in" = 1 ]; then
			kb=$((kb + v))
		fi
	done <"/proc/$1/smaps"
	echo "$kb"
}

# reserve_huge_pages N: N more huge pages of the default size in the pool,
# given back at cleanup. Compacts memory once when a fragmented machine
# cannot give them at first. Returns non-zero when it still cannot.
reserve_huge_pages() {
	local want=$1 old
	[ -w /proc/sys/vm/nr_hugepages ] || return 1
	old=$(cat /proc/sys/vm/nr_hugepages)
	on_cleanup "echo $old > /proc/sys/vm/nr_hugepages"
	echo $((old + want)) >/proc/sys/vm/nr_hugepages
	if [ "$(cat /proc/sys/vm/nr_hugepages)" -lt $((old + want)) ] &&
		[ -w /proc/sys/vm/compact_memory ]; then
		echo 1 >/proc/sys/vm/compact_memory
		echo $((old + want)) >/proc/sys/vm/nr_hugepages
	fi
	[ "$(cat /proc/sys/vm/nr_hugepages)" -ge $((old + want)) ]
}

# Process state letter (R, S, T, t, Z...) from /proc/PID/stat.
proc_state() { sed -e 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f1; }

# flip_byte FILE OFFSET: inverts every bit of the byte at OFFSET, so the
# file changes whatever that byte held (writing a fixed value does not
# when the byte already had it).
flip_byte() {
	python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1)
    if len(b) != 1: sys.exit("flip_byte: offset past the end")
    f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xff]))' "$1" "$2"
}

# expect_error NAME PATTERN CMD...: CMD must fail and say PATTERN
# (case-insensitive), with no sanitizer report (checked); its first line
# is shown.
expect_error() {
	local name=$1 pat=$2
	shift 2
	if SAN_WHO="expect_error $name" checked "$T/out" "$@"; then
		fail "$name: succeeded: $(cat "$T/out")"
	fi
	grep -qi -- "$pat" "$T/out" || fail "$name: error does not say '$pat': $(cat "$T/out")"
	info "$name: $(head -n 1 "$T/out")"
}

# wait_verified VAR: waits for the destination workload's verdict line.
wait_verified() {
	local var=$1
	for _ in $(seq 6000); do
		grep -q "^verified" "$T/$var.out" 2>/dev/null && break
		kill -0 "${!var}" 2>/dev/null || fail "workload $var died: $(cat "$T/$var.log")"
		sleep 0.1
	done
	grep '^verified' "$T/$var.out" || fail "workload $var never finished checking"
	grep -q '^verified [0-9]* pages, 0 mismatches, 0 lost' "$T/$var.out" ||
		fail "destination saw wrong bytes: $(cat "$T/$var.log")"
}

# wait_child_verified VAR LABEL: the verdict of the child a --event fork
# destination workload forked (it checks every page too).
wait_child_verified() {
	local var=$1 label=$2
	for _ in $(seq 600); do
		grep -q '^child verified' "$T/$var.out" 2>/dev/null && break
		sleep 0.1
	done
	grep -q '^child verified [0-9]* pages, 0 mismatches' "$T/$var.out" ||
		fail "the forked child saw wrong bytes: $(cat "$T/$var.out" "$T/$var.log")"
	info "$label: $(grep '^child verified' "$T/$var.out")"
}

# idle_child VAR: the pid of the child a --event fork-idle or fork-exit
# destination workload forked (it waits for SIGUSR1 before it checks), in
# CHILD; killed at cleanup.
idle_child() {
	local var=$1
	for _ in $(seq 600); do
		CHILD=$(sed -n 's/^child \([0-9]*\)$/\1/p' "$T/$var.out" 2>/dev/null)
		[ -n "$CHILD" ] && break
		sleep 0.05
	done
	[ -n "$CHILD" ] || fail "workload $var forked no child: $(cat "$T/$var.log")"
	PIDS+=("$CHILD")
}

# set_up_zram_swap SIZE: a zram swap device, removed at exit.
set_up_zram_swap() {
	local size=$1 dev
	command -v zramctl >/dev/null || skip "zramctl missing (util-linux)"
	[ -e /sys/class/zram-control/hot_add ] || modprobe zram 2>/dev/null || true
	[ -e /sys/class/zram-control/hot_add ] || skip "no zram in this kernel"
	dev=/dev/zram$(cat /sys/class/zram-control/hot_add)
	on_cleanup "swapoff $dev 2>/dev/null; zramctl --reset $dev 2>/dev/null; echo ${dev#/dev/zram} > /sys/class/zram-control/hot_remove 2>/dev/null"
	zramctl "$dev" --size "$size" >/dev/null || skip "zramctl $dev failed"
	mkswap "$dev" >/dev/null
	swapon "$dev" || skip "swapon $dev failed"
	ZRAM_DEV=$dev
}

# migrate SIZE SRC_THREADS DST_THREADS [SRC_ARGS] [DST_ARGS] [POKE]
# One whole migration between two fresh daemons, checked three ways: the
# destination's own per-word check, and SHA-256 of the frozen source's
# present pages (src_hash, taken just before attach, with the
# destination's pre-arrival writes applied) against SHA-256 of the same
# pages of the destination after completion (dst_hash). Sets MIG_ID and,
# from the source just before attach, SRC_PRESENT, SRC_SWAPPED, SRC_NONE
# (pagemap) and SRC_AHP (anon_huge_kb).
migrate() {
	local size=$1 sthreads=$2 dthreads=$3 sargs=${4:-} dargs=${5:-} poke=${6:-}
	local exportargs=${EXPORT_ARGS:-}
	local base=0x500000000000 end pokeargs=() id h_src h_dst
	end=$(printf '0x%x' $((base + $(numfmt --from=iec "$size"))))
	[ -n "$poke" ] && pokeargs=(--poke-every "$poke")
	# shellcheck disable=SC2086
	ensure_daemon src ${SRC_DAEMON_ARGS:-}
	# shellcheck disable=SC2086
	ensure_daemon dst ${DST_DAEMON_ARGS:-}
	# shellcheck disable=SC2086
	start_workload WS source --size "$size" --threads "$sthreads" $sargs
	# shellcheck disable=SC2086
	start_workload WD dest --size "$size" --threads "$dthreads" --prefault "${pokeargs[@]}" $dargs
	sleep 0.2 # let the source mutate for a moment
	RANGE=$(printf '%x-%x' $((base)) $((end)))
	# shellcheck disable=SC2086
	must "migrate: export" "$T/export.out" \
		"$CLIENT" --control "$src_SOCK" export "$WS" --range "$RANGE" $exportargs
	id=$(cat "$T/export.out")
	MIG_ID=$id
	[ "$(proc_state "$WS")" = T ] || fail "source not stopped after export"
	# Just before attach: what the source daemon will serve from.
	src_hash h_src "$WS" $base "$end" "${pokeargs[@]}"
	SRC_AHP=$(anon_huge_kb "$WS" $base "$end")
	info "source at attach: $SRC_PRESENT pages present, $SRC_SWAPPED swapped, $SRC_NONE neither; AnonHugePages $SRC_AHP kB"
	must "migrate: attach" "$T/attach.out" "$CLIENT" --control "$dst_SOCK" \
		attach "$WD" --from "$src_ADDR:$src_PORT" --id "$id" --range "$RANGE"
	grep -q '^attached' "$T/attach.out" || fail "attach printed: $(cat "$T/attach.out")"
	kill -USR1 "$WD"
	must "migrate: wait (destination)" "$T/wait.out" \
		"$CLIENT" --control "$dst_SOCK" wait "$id" --timeout 600
	wait_verified WD
	h_dst=$(dst_hash h_src "$WD" $base "$end")
	info "source sha256 $h_src"
	info "dest   sha256 $h_dst"
	[ "$h_src" = "$h_dst" ] || fail "destination memory differs from the source"
	# The source is told, and kills its frozen process (unless kept).
	SAN_WHO="migrate: wait (source)" checked "$T/src-wait.out" \
		"$CLIENT" --control "$src_SOCK" wait "$id" --timeout 60 ||
		fail "source side did not complete: $(cat "$T/src-wait.out")"
	if [ -z "$exportargs" ]; then
		for _ in $(seq 100); do
			kill -0 "$WS" 2>/dev/null || break
			[ "$(proc_state "$WS")" = Z ] && break
			sleep 0.05
		done
		[ "$(proc_state "$WS" 2>/dev/null || echo gone)" != T ] ||
			fail "source process still frozen after completion"
	fi
	# The destination's uffd is gone from the target after completion.
	if ls -l "/proc/$WD/fd" | grep -q 'anon_inode:\[userfaultfd\]'; then
		fail "target still holds a userfaultfd after completion"
	fi
	"$CLIENT" --control "$dst_SOCK" status "$id" --json >"$T/status.json"
	cat "$T/wait.out"
}

# state_resum FILE: the checksum line of state file FILE made right again
# after an edit (as root could), so that a test sees the daemon's other
# checks of what the file says (docs/state-files.md). A file of the old
# unversioned format, which had none, is left as it is.
state_resum() {
	head -n 1 "$1" | grep -q '^uffdd-state ' || return 0
	head -n -1 "$1" >"$1.body"
	{
		cat "$1.body"
		printf 'sha256 %s\n' "$(sha256sum <"$1.body" | cut -d' ' -f1)"
	} >"$1"
	rm -f "$1.body"
}

# make_user VAR: a throwaway unprivileged user for a test that plays an
# attacker (useradd, removed at exit); VAR gets its uid and AS_VAR the
# setpriv prefix that runs a command as it, as a login would (no
# capabilities; a setuid program still runs setuid).
make_user() {
	local var=$1 name=uffdd-t$$-$1 uid
	command -v useradd >/dev/null || skip "useradd missing (Debian package passwd)"
	command -v setpriv >/dev/null || skip "setpriv missing (util-linux)"
	useradd --system --no-create-home --shell /usr/sbin/nologin "$name" ||
		fail "useradd $name failed"
	on_cleanup "userdel $name 2>/dev/null"
	on_cleanup "pkill -KILL -u $name 2>/dev/null"
	uid=$(id -u "$name")
	eval "$var=$uid"
	eval "AS_$var=(setpriv --reuid=$uid --regid=$(id -g "$name") --clear-groups)"
}
