"""One migration of the chaos run, its faults, and its classification.

A migration runs its steps in order (source workload, export or snapshot,
attach, the target let go, wait) and starts each fault at its moment in
its phase on a thread of its own; the fault's end (a link healed, a daemon
started again, a disk emptied) comes on that thread too. Once the wait
returned and every fault ended, the checker classifies it (check.py):
  complete          the destination complete, its memory byte for byte the
                    source's, the target's own check clean;
  failed-stopped    failed, the target stopped (SIGSTOP);
  failed-poisoned   failed, the target running with its lost pages
                    poisoned (SIGBUS, counted by the workload) and no
                    wrong byte read;
  failed-gone       failed, the target gone (a fault killed it);
  refused           export, snapshot or attach refused, nothing touched.
Anything else is a violation, said with the seed and round.
"""
import os
import re
import signal
import subprocess
import threading
import time

import check
from daemon import SAN_REPORT, proc_state
from plan import PROCESS_MODES

BASE = 0x500000000000
WAIT_TIMEOUT = 150  # a hang past this is a violation
CLIENT_TIMEOUT = 60


class Migration:
    def __init__(self, run, rnd, m):
        self.run = run  # the driver: world, daemons, tools, counters
        self.rnd = rnd
        self.m = m
        self.pair = "tls" if m.tls else "plain"
        self.src = run.daemons[self.pair + "-src"]
        self.dst = run.daemons[self.pair + "-dst"]
        self.dir = os.path.join(run.tmp, "r%05d-m%d" % (rnd, m.slot))
        os.makedirs(self.dir, exist_ok=True)
        self.end = BASE + (m.size_mib << 20)
        self.range = "%x-%x" % (BASE, self.end)
        self.ws = self.wd = None
        self.id = None
        self.h_src = None  # a snapshotted source
        self.h_present = None  # the frozen source's present pages
        self.map = None  # which they were (memhash --present)
        self.h_kept = None  # the kept source, when the wait returned
        self.continued = []  # source-continued: wall-clock SIGCONT times
        self.ended = False  # the wait returned: no source run any more
        self.end_lock = threading.Lock()
        self.keep = m.keep_source or any(
            f.kind == "source-continued" for f in m.faults) or \
            m.mode == "precopy"
        self.threads = []
        self.notes = []
        self.violations = []
        self.outcome = None
        self.proxy = None
        self.image = os.path.join(self.dir, "snap.img")
        self.t0 = time.time()

    # -- helpers ----------------------------------------------------------

    def log(self, msg):
        """A step, at its time into the round and on the wall clock (the
        daemons stamp their lines the same way: UFFDD_LOG_TIMESTAMPS)."""
        now = time.time()
        with open(os.path.join(self.dir, "steps.log"), "a") as f:
            f.write("%.3f %s %s\n" % (now - self.t0, check.stamp(now), msg))

    def client(self, daemon, *args, timeout=CLIENT_TIMEOUT):
        cmd = [self.run.client, "--control", daemon.sock] + list(args)
        self.log("client " + " ".join(args))
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               timeout=timeout, env=self.run.client_env)
        except subprocess.TimeoutExpired:
            self.log("  timed out")
            return None, "timed out after %d s" % timeout
        self.log("  rc %d: %s" % (r.returncode, r.stdout.strip()[:300]))
        if SAN_REPORT.search(r.stdout):
            self.violation("uffd-client %s: sanitizer report: %s" % (
                args[0], r.stdout[SAN_REPORT.search(r.stdout).start():][
                    :600]))
        return r.returncode, r.stdout

    def workload_args(self):
        m = self.m
        a = ["--base", hex(BASE), "--size", str(m.size_mib << 20), "--seed",
             str(m.seed), "--kind", m.kind, "--untouched-every",
             str(m.untouched)]
        if m.zero_every:
            a += ["--zero-every", str(m.zero_every)]
        return a

    def start_workload(self, name, mode, args):
        out = os.path.join(self.dir, name + ".out")
        err = open(os.path.join(self.dir, name + ".log"), "w")
        p = subprocess.Popen([self.run.workload, mode] + args,
                             stdout=open(out, "w"), stderr=err,
                             stdin=subprocess.DEVNULL,
                             start_new_session=True,
                             env=self.run.client_env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if check.read(out).startswith("ready") or \
                    "\nready" in check.read(out):
                return p, out
            if p.poll() is not None:
                raise RuntimeError("workload %s died: %s" % (
                    name, check.read(err.name)))
            time.sleep(0.05)
        raise RuntimeError("workload %s not ready" % name)

    def stop_and_wait(self, pid):
        os.kill(pid, signal.SIGSTOP)
        for _ in range(200):
            if proc_state(pid) == "T":
                return
            time.sleep(0.01)

    # -- faults -----------------------------------------------------------

    def start_faults(self, phase):
        t0 = time.time()
        for f in self.m.faults:
            if f.phase != phase or f.kind in ("fork", "munmap", "discard"):
                continue
            if f.kind in ("corrupt", "truncate", "replay"):
                continue  # in the proxy, from the attach on
            if phase in ("export", "attach"):
                # Before the step it precedes: its start now, its end
                # on a thread.
                time.sleep(f.at)
                self.fault(f, t0, sync_start=True)
            else:
                t = threading.Thread(target=self.fault, args=(f, t0))
                t.start()
                self.threads.append(t)

    def fault(self, f, t0, sync_start=False):
        """Runs fault F: waits for its moment, does it, waits its duration,
        undoes it. Counted as injected when it was done."""
        if not sync_start:
            delay = t0 + f.at - time.time()
            if delay > 0:
                time.sleep(delay)
        self.log("fault " + f.describe())
        late = self.ended
        undo = self.do_fault(f)
        if undo == "late":
            self.run.injected(f.kind, done=False)
            return
        self.run.injected(f.kind, late=late)
        if undo is None:
            return
        if sync_start:
            t = threading.Thread(target=self._undo_later, args=(f, undo))
            t.start()
            self.threads.append(t)
        else:
            self._undo_later(f, undo)

    def _undo_later(self, f, undo):
        time.sleep(f.duration)
        try:
            undo()
        except Exception as e:  # the run goes on; the round notes it
            self.notes.append("undoing %s: %s" % (f.kind, e))
        self.log("fault %s undone" % f.kind)

    def do_fault(self, f):
        w = self.run.world
        if f.kind == "link-cut":
            h = w.cut(self.pair, f.variant, self.run.src_port)
            return lambda: w.heal(h)
        if f.kind == "delay":
            w.slow_down(self.pair, f.variant)
            return lambda: w.speed_up(self.pair)
        if f.kind in ("kill-src", "kill-dst"):
            d = self.src if f.kind == "kill-src" else self.dst
            with self.run.daemon_lock:
                if f.variant == "engine":
                    d.kill_engine()
                    return None
                d.kill()
            return lambda: self.run.restart(d)
        if f.kind == "state-full":
            d = self.src if f.variant == "src" else self.dst
            path = w.fill(d.state_dir, "r%d-m%d" % (self.rnd, self.m.slot))
            return lambda: os.unlink(path)
        if f.kind == "source-continued" and self.ws:
            # Not once the migration ended: the kept source is the
            # reference then, and must hold what it held at the commit.
            with self.end_lock:
                if self.ended or self.committed(self.src):
                    self.log("source-continued: too late, not done")
                    return "late"
                self.continued.append(time.time())
                os.kill(self.ws.pid, signal.SIGCONT)
                self.log("source-continued: SIGCONT sent")
                time.sleep(f.duration if f.variant == "cont-stop" else
                           0.1 + f.duration * 4)
                os.kill(self.ws.pid, signal.SIGSTOP)
                self.log("source-continued: SIGSTOP sent")
            return None
        if f.kind == "target-exit" and self.wd:
            with self.end_lock:
                if self.ended or self.committed(self.dst):
                    self.log("target-exit: too late, not done")
                    return "late"
                self.wd.kill()
            return None
        if f.kind == "image-damage":
            if f.variant == "truncate":
                os.truncate(self.image, min(f.offset,
                                            os.path.getsize(self.image)))
            else:
                with open(self.image, "r+b") as img:
                    img.seek(f.offset)
                    b = img.read(1)
                    if b:
                        img.seek(f.offset)
                        img.write(bytes([b[0] ^ 0xFF]))
            return None
        return None

    def committed(self, daemon):
        """DAEMON's side of the migration is complete: a process fault now
        would land after the commit, which the wait's poll may not have
        seen yet (it would change the kept source, the reference)."""
        if not self.id:
            return False
        rc, out = self.client(daemon, "status", self.id, "--json",
                              timeout=10)
        return rc == 0 and '"state":"complete"' in (out or "")

    def proxy_fault(self):
        for f in self.m.faults:
            if f.kind in ("corrupt", "truncate", "replay"):
                return f
        return None

    def start_proxy(self, f):
        """The tampering proxy beside the destination daemon, on a port of
        this slot; returns the address the attach names."""
        w = self.run.world
        ns = w.ns_of(self.pair, "dst")
        addr = w.addr_of(self.pair, "dst")
        port = 7600 + self.m.slot
        action = {"corrupt": "flip", "truncate": "truncate",
                  "replay": "replay"}[f.kind]
        self.proxy = subprocess.Popen(
            ["ip", "netns", "exec", ns, "python3", self.run.proxy_py, addr,
             str(port), w.addr_of(self.pair, "src"), str(self.run.src_port),
             "--action", action, "--at", str(f.offset), "--dir", f.variant],
            stdout=open(os.path.join(self.dir, "proxy.out"), "w"),
            stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(200):
            if "listening" in check.read(os.path.join(self.dir, "proxy.out")):
                break
            time.sleep(0.02)
        self.log("proxy %s at byte %d (%s)" % (action, f.offset, f.variant))
        self.run.injected(f.kind)
        return "%s:%d" % (addr, port)

    def join_faults(self):
        for t in self.threads:
            t.join()
        self.threads = []

    # -- the steps --------------------------------------------------------

    def execute(self):
        """Runs the migration; returns its outcome (violations aside)."""
        try:
            self._execute()
        finally:
            self.join_faults()
        self.classify()
        return self.outcome

    def _execute(self):
        m = self.m
        sargs = self.workload_args() + ["--threads", str(m.src_threads)]
        if m.mode == "precopy":
            sargs += ["--hot", "3", "--pace-us", "20"]
        dargs = self.workload_args() + [
            "--threads", str(m.dst_threads), "--pace-us", str(m.pace_us),
            "--sigbus-ok"]
        if m.prefault:
            dargs.append("--prefault")
        if m.poke:
            dargs += ["--poke-every", str(m.poke)]
        if m.event:
            dargs += ["--event", m.event]
        self.ws, _ = self.start_workload("source", "source", sargs)
        self.wd, self.wd_out = self.start_workload("dest", "dest", dargs)
        time.sleep(0.2)
        if m.mode in PROCESS_MODES:
            self.export_process()
        else:
            self.snapshot()
        if self.outcome:
            return
        self.start_faults("attach")
        if m.mode == "image-local":
            self.attach_image()
        else:
            self.attach_peer()

    def export_process(self):
        self.start_faults("export")
        args = ["export", str(self.ws.pid), "--range", self.range]
        if self.keep:
            args.append("--keep-source")
        if self.m.mode == "precopy":
            args.append("--precopy")
        rc, out = self.client(self.src, *args)
        if rc != 0:
            self.refused("export", out)
            # Refused: the process was let go as it was, running.
            st = proc_state(self.ws.pid)
            if st in (None, "Z", "T", "t"):
                self.violation("export refused (%s) but the source process "
                               "is %s" % (out.strip()[:200],
                                          st or "gone"))
            return
        self.id = out.strip().splitlines()[-1]
        if self.m.mode == "postcopy":
            self.map = os.path.join(self.dir, "source.map")
            self.h_present = check.memhash(
                self.run.memhash, self.ws.pid, BASE, self.end, self.m.poke,
                ("--present", self.map))
            if self.h_present is None:
                self.notes.append("no hash of the frozen source")

    def snapshot(self):
        self.stop_and_wait(self.ws.pid)
        rc, out = self.client(self.src, "snapshot", str(self.ws.pid), "--to",
                              self.image, "--keep-source", "--range",
                              self.range)
        if rc != 0:
            self.refused("snapshot", out)
            return
        self.h_src = check.memhash(self.run.memhash, self.ws.pid, BASE,
                                   self.end, self.m.poke)
        self.ws.kill()
        self.ws.wait()
        if self.m.mode == "image-served":
            rc, out = self.client(self.src, "export", "--image", self.image)
            if rc != 0:
                self.refused("export --image", out)
                return
            self.id = out.strip().splitlines()[-1]

    def attach_peer(self):
        f = self.proxy_fault()
        src = "%s:%d" % (self.run.world.addr_of(self.pair, "src"),
                         self.run.src_port)
        if f:
            src = self.start_proxy(f)
        rc, out = self.client(self.dst, "attach", str(self.wd.pid), "--from",
                              src, "--id", self.id, "--range", self.range)
        if rc != 0 or "attached" not in out:
            self.refused("attach", out)
            self.client(self.src, "cancel", self.id)
            return
        self.let_go()
        rc, out = self.client(self.dst, "wait", self.id, "--timeout",
                              str(WAIT_TIMEOUT), timeout=WAIT_TIMEOUT + 30)
        self.d_rc, self.d_out = rc, out or ""
        self.wait_returned()

    def let_go(self):
        """The target starts (its --event with it) and the run's faults."""
        os.kill(self.wd.pid, signal.SIGUSR1)
        if self.m.event:
            for f in self.m.faults:
                if f.kind in ("fork", "munmap", "discard"):
                    self.log("fault " + f.describe())
                    self.run.injected(f.kind)
        self.start_faults("run")

    def wait_returned(self):
        """The kept source hashed at once, before a late fault runs it."""
        with self.end_lock:
            self.ended = True
            if self.m.mode in PROCESS_MODES and self.keep and \
                    self.ws.poll() is None:
                # Its daemon may still be setting it aside: a moment.
                for _ in range(100):
                    if proc_state(self.ws.pid) in ("T", "t"):
                        break
                    time.sleep(0.02)
                self.h_kept = check.memhash(self.run.memhash, self.ws.pid,
                                            BASE, self.end, self.m.poke)

    def attach_image(self):
        out_path = os.path.join(self.dir, "attach.out")
        p = subprocess.Popen(
            [self.run.client, "--control", self.dst.sock, "attach",
             str(self.wd.pid), "--image", self.image, "--range", self.range,
             "--wait"], stdout=open(out_path, "w"), stderr=subprocess.STDOUT,
            env=self.run.client_env)
        deadline = time.time() + CLIENT_TIMEOUT
        while time.time() < deadline and p.poll() is None and \
                "attached" not in check.read(out_path):
            time.sleep(0.05)
        if "attached" not in check.read(out_path):
            try:
                p.wait(CLIENT_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
            self.refused("attach --image", check.read(out_path))
            return
        self.let_go()
        try:
            rc = p.wait(WAIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        self.d_rc, self.d_out = rc, check.read(out_path)
        self.ended = True

    # -- the checker ------------------------------------------------------

    def violation(self, what):
        self.violations.append(what)
        self.log("VIOLATION " + what)

    def refused(self, step, out):
        """A step refused: loud, and nothing of the target touched."""
        self.outcome = "refused"
        self.log("refused at %s: %s" % (step, (out or "").strip()[:300]))
        if self.wd and self.wd.poll() is None and step.startswith("attach"):
            if check.holds_uffd(self.wd.pid):
                self.violation("attach refused (%s) but the target holds a "
                               "userfaultfd" % (out or "").strip()[:200])

    def source_gone(self):
        return self.ws is not None and self.m.mode in PROCESS_MODES and \
            self.ws.poll() is not None

    def classify(self):
        for name, p in (("source", self.ws), ("target", self.wd)):
            if p is not None:
                self.log("%s %d: %s" % (name, p.pid, check.death(p) or
                                        "state %s" % proc_state(p.pid)))
        if self.outcome == "refused":
            self.finish()
            return
        rc, out = getattr(self, "d_rc", None), getattr(self, "d_out", "")
        if rc is None:
            self.outcome = "hang"
            self.violation("the destination's wait did not end within %d s"
                           % WAIT_TIMEOUT)
            self.finish()
            return
        if re.search(r"^uffd-client: unknown migration ID", out, re.M):
            self.violation("the migration vanished from the destination's "
                           "status: %s" % out.strip()[-200:])
        if check.death(self.wd) and any(f.kind == "target-exit"
                                        for f in self.m.faults):
            # The target was killed: completion (every page was in) and
            # failure are both right; the source must still hold a copy
            # unless the destination completed.
            self.outcome = "complete-gone" if rc == 0 else "failed-gone"
            if rc != 0 and self.source_gone():
                self.violation("the destination failed, yet the source "
                               "process is gone (%s)" % check.death(self.ws))
        elif rc == 0:
            self.classify_complete()
        else:
            self.classify_failed(out)
        self.finish()

    def hash_target(self):
        """Whether the target's memory is the source's: None when there is
        nothing to compare, else (ok, what). The frozen source's present
        pages (hashed before the attach) or the kept source (hashed when
        the wait returned) will do: a run of the source after the commit
        changes only the second."""
        if self.m.event in check.NO_HASH_EVENTS:
            return None
        tool, wd = self.run.memhash, self.wd.pid
        pairs = []
        if self.h_present:
            pairs.append((self.h_present, check.memhash(
                tool, wd, BASE, self.end, 0, ("--map", self.map))))
        for h in (self.h_src, self.h_kept):
            if h:
                pairs.append((h, check.memhash(tool, wd, BASE, self.end)))
        if not pairs:
            return None
        ok = any(want == got for want, got in pairs)
        return ok, ", ".join("source %s destination %s" % (
            want[:16], (got or "-")[:16]) for want, got in pairs)

    def classify_complete(self):
        self.outcome = "complete"
        v = check.verdict(self.wd_out, self.wd, 90)
        if v is None:
            st = proc_state(self.wd.pid)
            self.violation("complete, but the target never gave its verdict "
                           "(state %s, %s)" % (st, check.death(self.wd)))
            return
        if v[1] or v[2]:
            self.violation("complete, but the target read %d wrong words "
                           "and lost %d pages" % (v[1], v[2]))
        if self.m.event in ("fork", "fork-remove"):
            c = check.child_verdict(self.wd_out, 30)
            if c is None or c:
                self.violation("complete, but the forked child %s" % (
                    "gave no verdict" if c is None else
                    "read %d wrong words" % c))
        h = self.hash_target()
        if h and not h[0] and self.continued_after_commit():
            self.notes.append("differs from the kept source, which was "
                              "continued after the commit: not judged "
                              "(%s)" % h[1])
        elif h and not h[0]:
            self.violation("complete but different: %s" % h[1])
        if check.holds_uffd(self.wd.pid):
            self.violation("complete, but the target still holds a "
                           "userfaultfd")
        if self.id:
            rc, out = self.client(self.src, "wait", self.id, "--timeout",
                                  "60", timeout=90)
            if rc != 0:
                self.notes.append("destination complete, source side: %s" %
                                  (out or "").strip()[-200:])

    def continued_after_commit(self):
        """Whether the source process was continued after its daemon sent
        the COMMIT that the destination acted on (the last one the source's
        log has for this ID, its time stamped by UFFDD_LOG_TIMESTAMPS): the
        kept source then changed after the commit, the destination rightly
        not, and no hash taken from outside holds the bytes as of the
        commit. A continue before it is judged as any."""
        if not self.continued or not self.id:
            return False
        sent = check.commit_sent(self.src.log, self.id)
        self.log("source continued at %s; COMMIT sent at %s" % (
            ", ".join(check.stamp(t) for t in self.continued),
            check.stamp(sent) if sent else "-"))
        return sent is not None and min(self.continued) > sent

    def classify_failed(self, out):
        self.reason = out.strip()[-300:]
        gone = check.death(self.wd)
        st = proc_state(self.wd.pid) if not gone else None
        if gone:
            self.outcome = "failed-gone"
            if not any(f.kind == "target-exit" for f in self.m.faults) and \
                    "signal %d" % signal.SIGKILL not in gone:
                self.notes.append("target ended: %s" % gone)
        elif st in ("T", "t"):
            self.outcome = "failed-stopped"
        else:
            v = check.verdict(self.wd_out, self.wd, 90)
            if v is None:
                self.outcome = "hang"
                self.violation("failed, the target running (state %s) but "
                               "never finishing its check: a missing page "
                               "neither served nor poisoned" %
                               proc_state(self.wd.pid))
                return
            self.outcome = "failed-poisoned"
            if v[1]:
                self.violation("failed, the target running, and it read %d "
                               "wrong words" % v[1])
            if v[2] == 0:
                # Running on every page yet failed: those pages must be
                # the source's, or the target runs on torn memory.
                h = self.hash_target()
                if h and not h[0]:
                    self.violation("failed, the target running on torn "
                                   "memory (no page lost, hash differs)")
        if self.source_gone() and self.m.mode in PROCESS_MODES:
            self.violation("the destination failed, yet the source process "
                           "is gone (%s): no copy of its memory is left" %
                           check.death(self.ws))

    def finish(self):
        """Everything of this migration ended: workloads and proxy."""
        for p in (self.ws, self.wd, self.proxy):
            if p is None or p.poll() is not None:
                continue
            try:
                if p is not self.proxy:
                    os.kill(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                # A zombie no one collects: its tracer (a daemon that
                # held it) must, or its parent never can.
                self.violation("process %d a zombie 30 s after its end: "
                               "its tracer never collected it" % p.pid)
        # A forked child (--event fork) outlives its parent: its group.
        for p in (self.ws, self.wd):
            if p is not None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        # The forked children of --event fork: they exit when checked.
        if self.id and self.outcome not in ("complete",):
            self.client(self.src, "cancel", self.id, timeout=20)
