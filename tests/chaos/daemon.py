"""One uffdd daemon of the chaos run, as tests/lib.sh runs them: in its
network namespace, with a private control socket and state directory, its
log appended across restarts, its sanitizer reports in NAME.san.PID.

The driver is the only one who may kill a daemon. Every kill is counted,
so that a death nobody asked for (the privileged part gone, or an engine
restarted more often than it was killed) is seen; at the end each daemon
gets SIGCONT and SIGTERM and must exit 0 within 20 s with no sanitizer
report in its log or report files.
"""
import glob
import os
import re
import signal
import subprocess
import time

SAN_REPORT = re.compile(
    r"ERROR: (Address|Leak|UndefinedBehavior|Memory|Thread)Sanitizer|"
    r"SUMMARY: [A-Za-z]*Sanitizer|runtime error: ")
ENGINE_DEATH = re.compile(r"engine (killed by signal|exited with status)")
STOP_TIMEOUT = 20


def proc_state(pid):
    """The state letter of PID (R, S, T, t, Z...), or None when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def children(pid):
    out = []
    for task in glob.glob("/proc/%d/task/*/children" % pid):
        try:
            out += [int(x) for x in open(task).read().split()]
        except OSError:
            pass
    return out


def san_env(base, path):
    """The sanitizer options tests/lib.sh gives every program, reports
    going to PATH.PID."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (base.get("ASAN_OPTIONS", "") + ":" if
                           base.get("ASAN_OPTIONS") else "") + \
        "detect_leaks=1:handle_abort=1" + (":log_path=" + path if path else "")
    env["UBSAN_OPTIONS"] = (base.get("UBSAN_OPTIONS", "") + ":" if
                            base.get("UBSAN_OPTIONS") else "") + \
        "print_stacktrace=1:halt_on_error=1" + \
        (":log_path=" + path if path else "")
    return env


class Daemon:
    def __init__(self, uffdd, tmp, name, ns, listen, state_dir, args):
        self.uffdd = uffdd
        self.tmp = tmp
        self.name = name
        self.ns = ns
        self.listen = listen
        self.sock = os.path.join(tmp, name + ".sock")
        self.log = os.path.join(tmp, name + ".log")
        self.state_dir = state_dir
        self.args = args
        self.proc = None
        self.engine = None
        self.starts = 0
        self.engine_kills = 0  # engines the driver killed (not with it)
        self.problems = []  # deaths nobody asked for, bad exits, reports
        self.reported = set()

    def start(self):
        """Starts the daemon and waits for its "ready"."""
        cmd = ["ip", "netns", "exec", self.ns, self.uffdd, "-f", "--config",
               os.path.join(self.tmp, "empty.conf"), "--listen", self.listen,
               "--control", self.sock, "--state-dir", self.state_dir
               ] + self.args
        self.starts += 1
        with open(self.log, "a") as log:
            log.write("=== chaos: start %d at %.3f\n" % (self.starts,
                                                       time.time()))
            log.flush()
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(san_env(os.environ, os.path.join(
                    self.tmp, self.name + ".san")),
                    # Lines stamped, to be ordered against the faults.
                    UFFDD_LOG_TIMESTAMPS="1"))
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("uffdd %s exited at start: %s" % (
                    self.name, self.tail(10)))
            if os.path.exists(self.sock) and self._readies() >= self.starts:
                self.engine = self._engine()
                return
            time.sleep(0.05)
        raise RuntimeError("uffdd %s did not start: %s" % (self.name,
                                                          self.tail(10)))

    def _readies(self):
        try:
            return open(self.log, errors="replace").read().count(
                "ready: control")
        except OSError:
            return 0

    def _engine(self):
        for _ in range(100):
            kids = children(self.proc.pid)
            if kids:
                return kids[0]
            time.sleep(0.02)
        return None

    def tail(self, n):
        try:
            lines = open(self.log, errors="replace").read().splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def up(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL, as a crash would: the privileged part and its engine."""
        eng = self._engine() if self.up() else None
        for pid in (self.proc.pid, eng):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait()
        # The engine dies with it (PR_SET_PDEATHSIG): gone before a restart.
        for _ in range(250):
            if eng is None or proc_state(eng) in (None, "Z"):
                break
            time.sleep(0.02)
        with open(self.log, "a") as log:
            log.write("=== chaos: killed (SIGKILL) at %.3f\n" % time.time())

    def kill_engine(self):
        """SIGKILL to the engine alone: the privileged part says so and
        starts another, which takes the migrations up. Waits for it."""
        eng = self._engine()
        if eng is None:
            return False
        self.engine_kills += 1
        with open(self.log, "a") as log:
            log.write("=== chaos: engine %d killed (SIGKILL) at %.3f\n" % (
                eng, time.time()))
        os.kill(eng, signal.SIGKILL)
        deadline = time.time() + 15
        while time.time() < deadline:
            kids = [k for k in children(self.proc.pid) if k != eng]
            if kids:
                self.engine = kids[0]
                return True
            time.sleep(0.05)
        return True

    def check_alive(self):
        """Problems since the last look: the daemon gone, or an engine that
        died though nobody killed it. A dead daemon is started again."""
        found = []
        if not self.up():
            rc = self.proc.returncode
            found.append("daemon %s (pid %d) died unasked: %s" % (
                self.name, self.proc.pid,
                "signal %d" % -rc if rc < 0 else "exit status %d" % rc))
            self.start()
        deaths = len(ENGINE_DEATH.findall(
            open(self.log, errors="replace").read()))
        if deaths > self.engine_kills:
            found.append("daemon %s: its engine died %d times, %d of them "
                         "killed by the driver" % (self.name, deaths,
                                                   self.engine_kills))
            self.engine_kills = deaths  # said once
        self.problems += found
        return found

    def stop(self):
        """SIGCONT and SIGTERM; must exit 0 within STOP_TIMEOUT seconds."""
        if not self.up():
            return
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            rc = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.problems.append("daemon %s (pid %d): still running %d s "
                                 "after SIGTERM: killed" % (
                                     self.name, self.proc.pid, STOP_TIMEOUT))
            return
        if rc != 0:
            self.problems.append("daemon %s (pid %d): %s at SIGTERM" % (
                self.name, self.proc.pid,
                "killed by signal %d" % -rc if rc < 0 else
                "exited with status %d" % rc))

    def check_reports(self):
        """A sanitizer report in the log or a report file is a problem."""
        for f in [self.log] + sorted(glob.glob(os.path.join(
                self.tmp, self.name + ".san.*"))):
            if f in self.reported or not os.path.isfile(f):
                continue
            lines = open(f, errors="replace").read().splitlines()
            for i, line in enumerate(lines):
                if SAN_REPORT.search(line):
                    self.reported.add(f)
                    self.problems.append(
                        "daemon %s: sanitizer report in %s:\n    %s" % (
                            self.name, f, "\n    ".join(lines[i:i + 12])))
                    break
