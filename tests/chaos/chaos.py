#!/usr/bin/env python3
"""The adversarial schedule harness (make chaos, tests/integration/t_chaos.sh).

chaos.py BUILDDIR [--seed S] [--seconds N] [--rounds N] [--only R]
         [--faults a,b] [--parallel N] [--tls both|tls|plain] [--cycle]
         [--keep] [--json FILE]

Runs rounds of migrations between real uffdd daemons (world.py: a TLS pair
on two network namespaces joined by a veth, a plaintext pair on a third
namespace's loopback), each round planned from (seed, round) alone
(plan.py), with faults injected at their moments (migration.py), every
migration classified from outside the daemons (check.py). Ends after N
seconds or N rounds, whichever comes first (a round under way finishes).

Prints every violation as it is found, with the command that replays its
round, and at the end one line per fault kind: how often it was injected,
the outcomes of the migrations it hit, and their violations. Exit status:
0 no violation, 1 violations (or a daemon that died unasked, failed to stop
or left a sanitizer report), 77 the machine cannot run it.
"""
import argparse
import collections
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plan  # noqa: E402
from daemon import Daemon, san_env  # noqa: E402
from migration import Migration  # noqa: E402
from world import World, SetupError, SRC_PORT, DST_PORT  # noqa: E402

OUTCOMES = ("complete", "complete-gone", "failed-stopped", "failed-poisoned", "failed-gone",
            "refused", "hang", "error")


class Run:
    def __init__(self, a):
        self.a = a
        b = os.path.abspath(a.builddir)
        self.uffdd = os.path.join(b, "daemon", "uffdd")
        self.client = os.path.join(b, "client", "uffd-client")
        self.workload = os.path.join(b, "tests", "workload")
        self.memhash = os.path.join(b, "tests", "memhash")
        here = os.path.dirname(os.path.abspath(__file__))
        self.proxy_py = os.path.join(here, "proxy.py")
        self.tmp = tempfile.mkdtemp(prefix="uffdd-chaos.")
        self.client_env = san_env(os.environ, None)
        self.src_port = SRC_PORT
        self.world = World(self.tmp)
        self.daemons = {}
        self.daemon_lock = threading.Lock()
        self.lock = threading.Lock()
        self.injections = collections.Counter()
        self.late = collections.Counter()
        self.outcomes = collections.defaultdict(collections.Counter)
        self.fault_violations = collections.Counter()
        self.violations = []
        self.migrations = 0

    def injected(self, kind, late=False, done=True):
        """A fault done (LATE: after its migration's wait returned, so it
        hit only the daemons and the other migrations), or not done as it
        came too late to hit its process."""
        with self.lock:
            if done:
                self.injections[kind] += 1
            if late or not done:
                self.late[kind] += 1

    def restart(self, d):
        with self.daemon_lock:
            if not d.up():
                d.start()

    # -- setup ------------------------------------------------------------

    def setup(self):
        for tool in (self.uffdd, self.client, self.workload, self.memhash):
            if not os.access(tool, os.X_OK):
                raise SetupError("%s missing (build it first)" % tool)
        for tool in ("ip", "nft", "tc", "openssl"):
            if not shutil.which(tool):
                raise SetupError("%s missing" % tool)
        open(os.path.join(self.tmp, "empty.conf"), "w").close()
        w = self.world
        w.setup_net()
        w.make_pki()
        self.hugetlb = w.reserve_huge(40)
        for pair in ("tls", "plain"):
            for role, port in (("src", SRC_PORT), ("dst", DST_PORT)):
                name = "%s-%s" % (pair, role)
                sec = w.tls_args if pair == "tls" else ["--insecure"]
                d = Daemon(self.uffdd, self.tmp, name, w.ns_of(pair, role),
                           "%s:%d" % (w.addr_of(pair, role), port),
                           w.state_disk(name),
                           sec + ["--pause-deadline", "20"] +
                           # A source's stream held to a few seconds, so
                           # that faults find migrations under way.
                           (["--bulk-rate", "12M"] if role == "src"
                            else []))
                d.start()
                self.daemons[name] = d

    def config(self):
        a = self.a
        faults = tuple(a.faults.split(",")) if a.faults else plan.FAULT_NAMES
        for f in faults:
            if f not in plan.FAULTS:
                raise SystemExit("unknown fault kind %s (known: %s)" % (
                    f, ", ".join(plan.FAULT_NAMES)))
        return plan.Config(seed=a.seed, faults=faults, modes=plan.MODES,
                           kinds=plan.KINDS, tls=a.tls, parallel=a.parallel,
                           hugetlb=self.hugetlb, cycle=a.cycle)

    # -- rounds -----------------------------------------------------------

    def round(self, cfg, r):
        rp = plan.plan_round(cfg, r)
        print("round %d: %s" % (r, "; ".join(
            "[%d] %s" % (m.slot, m.describe()) for m in rp.migs)), flush=True)
        for f in rp.faults:
            print("    fault %s" % f.describe(), flush=True)
        migs = [Migration(self, r, m) for m in rp.migs]
        threads = [threading.Thread(target=self.one, args=(mg,))
                   for mg in migs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.world.heal_all()
        for d in self.daemons.values():
            if not d.up() and d.starts and d.problems == []:
                pass
            for p in d.check_alive():
                self.violation(r, None, p)
            d.check_reports()
        for mg in migs:
            self.account(r, mg)

    def one(self, mg):
        try:
            mg.execute()
        except Exception:
            mg.outcome = mg.outcome or "error"
            mg.notes.append(traceback.format_exc().strip().splitlines()[-1])
            mg.log(traceback.format_exc())
            mg.join_faults()
            try:
                mg.finish()
            except Exception:
                pass

    def account(self, r, mg):
        with self.lock:
            self.migrations += 1
            kinds = sorted({f.kind for f in mg.m.faults}) or ["none"]
            for k in kinds:
                self.outcomes[k][mg.outcome] += 1
                self.fault_violations[k] += len(mg.violations)
        print("  [%d] %s%s" % (mg.m.slot, mg.outcome,
                               "" if not mg.notes else
                               " (" + "; ".join(mg.notes) + ")"), flush=True)
        for v in mg.violations:
            self.violation(r, mg, v)

    def violation(self, r, mg, what):
        where = "round %d" % r + ("" if mg is None else
                                  " migration %d (%s)" % (
                                      mg.m.slot, mg.m.describe()))
        faults = "" if mg is None else "; faults: " + (", ".join(
            f.describe() for f in mg.m.faults) or "none")
        line = ("VIOLATION seed %d %s: %s%s\n    replay: CHAOS_SEED=%d "
                "CHAOS_ONLY=%d make chaos   (%s)" % (
                    self.a.seed, where, what, faults, self.a.seed, r,
                    mg.dir if mg else self.tmp))
        with self.lock:
            self.violations.append(line)
        print(line, flush=True)

    def stop(self):
        for d in self.daemons.values():
            d.stop()
            d.check_reports()
            for p in d.problems:
                if p not in [v for v in self.violations]:
                    self.violation(-1, None, p)
                    d.problems = []

    def table(self):
        rows = ["| fault kind | injected | late | migrations | " +
                " | ".join(OUTCOMES) + " | violations |",
                "|---|---:|---:|---:|" + "---:|" * len(OUTCOMES) + "---:|"]
        for k in list(plan.FAULT_NAMES) + ["none"]:
            o = self.outcomes.get(k, collections.Counter())
            rows.append("| %s | %s | %s | %d | %s | %d |" % (
                k, "-" if k == "none" else self.injections[k],
                "-" if k == "none" else self.late[k],
                sum(o.values()), " | ".join(str(o[x]) for x in OUTCOMES),
                self.fault_violations[k]))
        return "\n".join(rows)


def stop_signal(sig, frame):
    raise KeyboardInterrupt("signal %d" % sig)


def main():
    # SIGTERM (and SIGINT, which a background job ignores) ends the run as
    # its end does: daemons stopped and checked, the world undone.
    signal.signal(signal.SIGTERM, stop_signal)
    signal.signal(signal.SIGINT, stop_signal)
    ap = argparse.ArgumentParser()
    ap.add_argument("builddir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--only", type=int, default=-1)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--faults", default="")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--tls", default="both", choices=("both", "tls", "plain"))
    ap.add_argument("--cycle", action="store_true",
                    help="round R's first fault of the R-th kind")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary directory")
    ap.add_argument("--json", help="write the counts here")
    a = ap.parse_args()
    run = Run(a)
    t0 = time.time()
    rc = 0
    try:
        try:
            run.setup()
        except SetupError as e:
            print("SKIP: %s" % e)
            return 77
        cfg = run.config()
        print("chaos: seed %d, up to %g s%s, hugetlb %s, in %s" % (
            a.seed, a.seconds, ", %d rounds" % a.rounds if a.rounds else "",
            "yes" if run.hugetlb else "no", run.tmp), flush=True)
        r = a.only if a.only >= 0 else a.first
        done = 0
        while True:
            run.round(cfg, r)
            done += 1
            r += 1
            if a.only >= 0 or (a.rounds and done >= a.rounds) or \
                    time.time() - t0 >= a.seconds:
                break
    finally:
        run.stop()
        run.world.heal_all()
        run.world.teardown()
    secs = time.time() - t0
    print("\nchaos: seed %d, %d rounds, %d migrations in %.0f s, %d "
          "violations" % (a.seed, done, run.migrations, secs,
                          len(run.violations)))
    print(run.table())
    for v in run.violations:
        print(v)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"seed": a.seed, "rounds": done, "seconds": secs,
                       "migrations": run.migrations,
                       "injected": run.injections, "late": run.late,
                       "outcomes": run.outcomes,
                       "violations": run.violations}, f, indent=1)
    if run.violations:
        rc = 1
    if not a.keep and not run.violations:
        shutil.rmtree(run.tmp, ignore_errors=True)
    else:
        print("chaos: logs kept in %s" % run.tmp)
    return rc


if __name__ == "__main__":
    sys.exit(main())
