"""The chaos run's decisions, drawn from the seed and nothing else.

Round R of a run with seed S draws every choice (how many migrations, each
one's memory kind, size, mode and transport, which faults, when, how long,
at which byte) from random.Random("S/R"), before anything runs: the plan is
a pure function of (seed, round, configuration). Replaying a seed replays
the same plans, round for round, whatever the machine's timing did to the
first run; CHAOS_ONLY=R replays one round alone.
"""
import random
from dataclasses import dataclass, field

MODES = ("postcopy", "precopy", "image-local", "image-served")
KINDS = ("anon", "thp", "shared", "memfd", "tmpfs", "hugetlb",
         "hugetlb-shared")
# Kinds each mode takes (t_precopy and t_image_restore cover these).
MODE_KINDS = {
    "postcopy": KINDS,
    "precopy": ("anon", "thp", "shared", "memfd", "hugetlb"),
    "image-local": KINDS,
    "image-served": KINDS,
}
PEER_MODES = ("postcopy", "precopy", "image-served")  # two daemons, lanes
PROCESS_MODES = ("postcopy", "precopy")  # a live source process

# What each fault kind does, whom it hits (the daemon pair of a migration,
# or one migration), and which migrations it applies to.
FAULTS = {
    "link-cut": ("pair", PEER_MODES),
    "delay": ("pair", PEER_MODES),
    "kill-src": ("pair", PEER_MODES),
    "kill-dst": ("pair", MODES),
    "state-full": ("pair", MODES),
    "source-continued": ("migration", PROCESS_MODES),
    "target-exit": ("migration", MODES),
    "fork": ("migration", ("postcopy", "image-local", "image-served")),
    "munmap": ("migration", ("postcopy", "image-local", "image-served")),
    "discard": ("migration", ("postcopy", "image-local", "image-served")),
    "corrupt": ("migration", PEER_MODES),
    "truncate": ("migration", PEER_MODES),
    "replay": ("migration", PEER_MODES),
    "image-damage": ("migration", ("image-local", "image-served")),
}
FAULT_NAMES = tuple(FAULTS)
EVENT_FAULTS = ("fork", "munmap", "discard")  # the target's own doing
PROXY_FAULTS = ("corrupt", "truncate", "replay")
# Frames changed or replayed on a plaintext lane are not detectable by
# design (plaintext is for loopback, where nobody sits between): only TLS.
TLS_ONLY = ("corrupt", "replay")


@dataclass
class MigPlan:
    """One migration's parameters."""
    slot: int
    mode: str
    kind: str
    size_mib: int
    tls: bool
    seed: int
    keep_source: bool
    src_threads: int
    dst_threads: int
    pace_us: int
    prefault: bool
    poke: int  # --poke-every K, 0 for none
    untouched: int  # --untouched-every K
    zero_every: int  # --zero-every K, 0 for none
    event: str = ""  # the destination workload's --event
    faults: list = field(default_factory=list)

    def describe(self):
        extra = []
        if self.event:
            extra.append("--event " + self.event)
        if self.poke:
            extra.append("poke/%d" % self.poke)
        if not self.keep_source and self.mode in PROCESS_MODES:
            extra.append("source killed at completion")
        return "%s %s %d MiB %s%s" % (
            self.mode, self.kind, self.size_mib,
            "tls" if self.tls else "plaintext",
            (" (" + ", ".join(extra) + ")") if extra else "")


@dataclass
class FaultPlan:
    """One fault: its kind, whom it hits, when and how."""
    kind: str
    slot: int  # the migration it hits (pair faults: that migration's pair)
    phase: str  # export (before it), attach (between export and attach), run
    at: float  # seconds after its phase began
    duration: float = 0.0
    variant: str = ""
    offset: int = 0  # proxy faults: the byte of the stream; image: the byte

    def describe(self):
        s = "%s" % self.kind
        if self.variant:
            s += "(%s)" % self.variant
        s += " on migration %d" % self.slot
        s += " %s+%.2fs" % (self.phase, self.at)
        if self.duration:
            s += " for %.2fs" % self.duration
        if self.offset:
            s += " at byte %d" % self.offset
        return s


@dataclass
class RoundPlan:
    index: int
    migs: list
    faults: list


@dataclass
class Config:
    seed: int
    faults: tuple  # enabled fault kinds
    modes: tuple
    kinds: tuple
    tls: str  # both, tls, plain
    parallel: int  # at most this many migrations at once
    hugetlb: bool  # huge pages could be reserved
    # Round R's first fault is of kind faults[R % len(faults)], its
    # migration made to fit: every kind within a few rounds (t_chaos).
    cycle: bool = False


def _mig(rng, slot, cfg, fit=None):
    """A migration; FIT, a fault kind it must take (cfg.cycle)."""
    modes = cfg.modes
    if fit:
        modes = [m for m in modes if m in FAULTS[fit][1]] or modes
    mode = rng.choice(modes)
    kinds = [k for k in MODE_KINDS[mode] if k in cfg.kinds and
             (cfg.hugetlb or not k.startswith("hugetlb")) and
             (fit not in EVENT_FAULTS or _events(k, fit))]
    if not kinds:
        kinds = [k for k in MODE_KINDS[mode] if not k.startswith("hugetlb")]
    kind = rng.choice(kinds)
    # Small enough for many rounds under the sanitized build, big enough
    # (with the sources' --bulk-rate) to last while faults come.
    sizes = (8, 16) if kind.startswith("hugetlb") else (8, 16, 32, 48)
    tls = {"tls": True, "plain": False}.get(cfg.tls)
    if tls is None:
        tls = rng.random() < 0.6 or fit in TLS_ONLY
    return MigPlan(
        slot=slot, mode=mode, kind=kind, size_mib=rng.choice(sizes),
        tls=tls, seed=rng.randrange(1, 1 << 30),
        keep_source=rng.random() < 0.75,
        src_threads=rng.choice((1, 2)), dst_threads=rng.choice((2, 3, 4)),
        pace_us=rng.choice((50, 100, 200, 400)),
        prefault=rng.random() < 0.5,
        poke=rng.choice((0, 0, 7, 64)),
        untouched=rng.choice((16, 7, 3)),
        zero_every=rng.choice((0, 0, 5, 16)))


# The destination workload's events for each fault kind, by memory kind.
def _events(kind, fault):
    anon = kind in ("anon", "thp")
    if kind.startswith("hugetlb"):
        return ()  # its 2 MiB pages: the 1 MiB event range does not fit
    if fault == "fork":
        # fork-exit leaves a child to be migrated alone, which the
        # checker does not follow.
        return ("fork", "fork-remove") if anon else ("fork",)
    if fault == "munmap":
        return ("unmap", "remap", "protect") + (("grow",) if kind == "anon"
                                                else ())
    if fault == "discard":
        # remove is MADV_DONTNEED on anon, MADV_REMOVE on shared memory:
        # neither on THP, which the workload maps private.
        if kind == "thp":
            return ()
        return ("remove",) + (("punch",) if kind in ("memfd", "tmpfs")
                              else ())
    return ()


def _applies(kind, m):
    scope, modes = FAULTS[kind]
    if m.mode not in modes:
        return False
    if kind in TLS_ONLY and not m.tls:
        return False
    if kind in EVENT_FAULTS:
        return bool(_events(m.kind, kind)) and not m.event
    taken = {f.kind for f in m.faults}
    if kind in PROXY_FAULTS and taken & set(PROXY_FAULTS):
        return False  # one proxy per migration, one action
    if kind in ("target-exit", "image-damage", "source-continued") and \
            kind in taken:
        return False
    return True


def _fault(rng, kind, m):
    f = FaultPlan(kind=kind, slot=m.slot, phase="run",
                  at=round(rng.uniform(0.0, 2.5), 2))
    size = m.size_mib << 20
    if kind == "link-cut":
        f.variant = rng.choice(("link-down", "nft-drop"))
        # One in ten outlasts the destination's pause deadline (20 s).
        f.duration = round(rng.uniform(21, 25) if rng.random() < 0.1
                           else rng.uniform(0.5, 6), 2)
    elif kind == "delay":
        f.variant = rng.choice(("256kbit", "1mbit", "4mbit"))
        f.duration = round(rng.uniform(1, 6), 2)
    elif kind in ("kill-src", "kill-dst"):
        f.variant = rng.choice(("daemon", "daemon", "engine"))
        f.duration = round(rng.uniform(0.1, 3), 2)
        if kind == "kill-src" and rng.random() < 0.2:
            f.phase = "attach"
            f.at = round(rng.uniform(0, 0.3), 2)
    elif kind == "state-full":
        f.variant = rng.choice(("src", "dst"))
        f.duration = round(rng.uniform(0.5, 4), 2)
        r = rng.random()
        if r < 0.3 and m.mode in PROCESS_MODES:
            f.variant, f.phase, f.at = "src", "export", 0.0
        elif r < 0.6:
            f.variant, f.phase, f.at = "dst", "attach", 0.0
    elif kind == "source-continued":
        f.variant = rng.choice(("cont", "cont-stop"))
        f.duration = round(rng.uniform(0, 0.05), 3)  # cont-stop: the run
        if rng.random() < 0.2:
            f.phase, f.at = "attach", round(rng.uniform(0, 0.3), 2)
    elif kind in EVENT_FAULTS:
        f.variant = rng.choice(_events(m.kind, kind))
        f.at = 0.0  # at SIGUSR1, when the target starts
        m.event = f.variant
        m.poke = 0  # a poke into pages the event made read-only: SIGSEGV
    elif kind in PROXY_FAULTS:
        # What the source sends mostly; now and then what the destination
        # sends (requests, HAVE bitmaps: far fewer bytes).
        if rng.random() < 0.8:
            f.variant = "down"
            f.offset = rng.randrange(4096, max(8192, size))
        else:
            f.variant = "up"
            f.offset = rng.randrange(512, 65536)
        f.at = 0.0
    elif kind == "image-damage":
        f.variant = rng.choice(("truncate", "flip"))
        f.offset = rng.randrange(4096, size)
    return f


def plan_round(cfg, index):
    """The plan of round INDEX: a pure function of cfg and index."""
    rng = random.Random("%d/%d" % (cfg.seed, index))
    n = 1 if cfg.parallel < 2 or rng.random() < 0.7 else 2
    fit = cfg.faults[index % len(cfg.faults)] if cfg.cycle else None
    migs = [_mig(rng, slot, cfg, fit if slot == 0 else None)
            for slot in range(n)]
    faults = []
    r = rng.random()
    want = 0 if r < 0.15 else 1 if r < 0.7 else 2 if r < 0.95 else 3
    if fit:
        want = max(want, 1)
    for i in range(want):
        kinds = [k for k in cfg.faults
                 if any(_applies(k, m) for m in migs)]
        if not kinds:
            break
        kind = rng.choice(kinds)
        if i == 0 and fit in kinds:
            kind = fit
        m = rng.choice([m for m in migs if _applies(kind, m)])
        f = _fault(rng, kind, m)
        m.faults.append(f)
        faults.append(f)
    return RoundPlan(index=index, migs=migs, faults=faults)
