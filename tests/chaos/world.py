"""The chaos run's world: network namespaces, links, certificates, state
disks and huge pages, all made here and all undone at the end.

Two daemon pairs run side by side:
  tls    a source daemon on a "source host" and a destination daemon on a
         "destination host": two network namespaces joined by a veth pair,
         TLS 1.3 with a throwaway CA;
  plain  both daemons in a third namespace, plaintext on its loopback (the
         daemon allows plaintext there only).
A link is cut by taking the source host's veth down or by nft rules that
drop the source daemon's port, only ever inside these namespaces; it is
slowed by a tbf qdisc (the kernel here may lack netem). Nothing outside the
namespaces, the temporary directory and the huge page pool is touched.
"""
import errno
import os
import subprocess
import threading

SRC_ADDR = "10.232.0.1"
DST_ADDR = "10.232.0.2"
SRC_PORT = 7401
DST_PORT = 7402


class SetupError(Exception):
    """The machine cannot run the chaos driver (the run is skipped)."""


def sh(*args, check=True, **kw):
    """Runs a command quietly; its output on failure."""
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(args), r.returncode,
                                               r.stdout.strip()))
    return r


class World:
    def __init__(self, tmp):
        self.tmp = tmp
        tag = str(os.getpid())
        self.ns_src = "chaos-src-" + tag
        self.ns_dst = "chaos-dst-" + tag
        self.ns_lo = "chaos-lo-" + tag
        self.veth_src = "cS" + tag
        self.veth_dst = "cD" + tag
        self.undo = []
        self.lock = threading.Lock()
        # Overlapping faults share one link: it is down (or slow) while
        # any of them says so. pair -> count.
        self.down = {"tls": 0, "plain": 0}
        self.slow = {"tls": 0, "plain": 0}
        self.nft_n = 0
        self.huge_added = 0
        self.mounts = []

    # -- namespaces -------------------------------------------------------

    def setup_net(self):
        for ns in (self.ns_src, self.ns_dst, self.ns_lo):
            if sh("ip", "netns", "add", ns, check=False).returncode != 0:
                raise SetupError("cannot create a network namespace")
            self.undo.append(lambda ns=ns: sh("ip", "netns", "del", ns,
                                              check=False))
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        if sh("ip", "link", "add", self.veth_src, "netns", self.ns_src,
              "type", "veth", "peer", "name", self.veth_dst, "netns",
              self.ns_dst, check=False).returncode != 0:
            raise SetupError("cannot create a veth pair")
        sh("ip", "-n", self.ns_src, "addr", "add", SRC_ADDR + "/24", "dev",
           self.veth_src)
        sh("ip", "-n", self.ns_dst, "addr", "add", DST_ADDR + "/24", "dev",
           self.veth_dst)
        sh("ip", "-n", self.ns_src, "link", "set", self.veth_src, "up")
        sh("ip", "-n", self.ns_dst, "link", "set", self.veth_dst, "up")

    def ns_of(self, pair, role):
        """The namespace where PAIR's ROLE (src, dst) daemon runs."""
        if pair == "plain":
            return self.ns_lo
        return self.ns_src if role == "src" else self.ns_dst

    def addr_of(self, pair, role):
        if pair == "plain":
            return "127.0.0.1"
        return SRC_ADDR if role == "src" else DST_ADDR

    # -- links ------------------------------------------------------------

    def cut(self, pair, variant, port):
        """The link of PAIR goes silent: no reset, no error. Returns what
        heal() needs."""
        with self.lock:
            if variant == "link-down" and pair == "tls":
                self.down[pair] += 1
                if self.down[pair] == 1:
                    sh("ip", "-n", self.ns_src, "link", "set",
                       self.veth_src, "down")
                return ("link", pair)
            self.nft_n += 1
            table = "chaos_cut_%d" % self.nft_n
            ns = self.ns_lo if pair == "plain" else self.ns_src
            rules = "\n".join(
                "chain %s {\n type filter hook %s priority 0; "
                "policy accept;\n tcp dport %d drop\n tcp sport %d drop\n}"
                % (c, c, port, port) for c in ("input", "output"))
            sh("ip", "netns", "exec", ns, "nft", "-f", "-",
               input="table inet %s {\n%s\n}\n" % (table, rules))
            return ("nft", ns, table)

    def heal(self, handle):
        with self.lock:
            if handle[0] == "link":
                pair = handle[1]
                self.down[pair] -= 1
                if self.down[pair] == 0:
                    sh("ip", "-n", self.ns_src, "link", "set",
                       self.veth_src, "up")
            else:
                sh("ip", "netns", "exec", handle[1], "nft", "delete",
                   "table", "inet", handle[2], check=False)

    def _qdisc_devs(self, pair):
        if pair == "plain":
            return [(self.ns_lo, "lo")]
        return [(self.ns_src, self.veth_src), (self.ns_dst, self.veth_dst)]

    def slow_down(self, pair, rate):
        """PAIR's link carries RATE (tbf), both ways: delays that grow with
        what is queued."""
        with self.lock:
            self.slow[pair] += 1
            if self.slow[pair] > 1:
                return
            for ns, dev in self._qdisc_devs(pair):
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev,
                   "root", "tbf", "rate", rate, "burst", "16kb", "latency",
                   "2s")

    def speed_up(self, pair):
        with self.lock:
            self.slow[pair] -= 1
            if self.slow[pair] > 0:
                return
            for ns, dev in self._qdisc_devs(pair):
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev,
                   "root", check=False)

    def heal_all(self):
        """Every link up and fast again (after a round that broke off)."""
        with self.lock:
            for pair in ("tls", "plain"):
                if self.down[pair]:
                    self.down[pair] = 0
                    sh("ip", "-n", self.ns_src, "link", "set",
                       self.veth_src, "up", check=False)
                if self.slow[pair]:
                    self.slow[pair] = 0
                    for ns, dev in self._qdisc_devs(pair):
                        sh("ip", "netns", "exec", ns, "tc", "qdisc", "del",
                           "dev", dev, "root", check=False)
            for ns in (self.ns_src, self.ns_dst, self.ns_lo):
                out = sh("ip", "netns", "exec", ns, "nft", "list", "tables",
                         check=False).stdout
                for line in out.splitlines():
                    parts = line.split()
                    if len(parts) == 3 and parts[2].startswith("chaos_cut_"):
                        sh("ip", "netns", "exec", ns, "nft", "delete",
                           "table", "inet", parts[2], check=False)

    # -- certificates -----------------------------------------------------

    def make_pki(self):
        """A CA and one certificate every daemon shows, as server and as
        client, naming every address a peer is reached at (proxies
        included); made with the openssl CLI as tests/lib.sh does."""
        pki = os.path.join(self.tmp, "pki")
        os.makedirs(os.path.join(pki, "db"))
        open(os.path.join(pki, "db", "index.txt"), "w").close()
        with open(os.path.join(pki, "db", "serial"), "w") as f:
            f.write("01\n")
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
              "-nodes")
        sh("openssl", "req", "-x509", *ec, "-keyout", pki + "/ca.key",
           "-out", pki + "/ca.crt", "-days", "2", "-subj",
           "/CN=uffdd chaos CA")
        with open(pki + "/ca.cnf", "w") as f:
            f.write("""[ca]
default_ca = tca
[tca]
dir = %s/db
database = $dir/index.txt
new_certs_dir = $dir
serial = $dir/serial
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
subjectAltName = IP:127.0.0.1,IP:%s,IP:%s,DNS:localhost
""" % (pki, SRC_ADDR, DST_ADDR))
        sh("openssl", "req", *ec, "-keyout", pki + "/node.key", "-out",
           pki + "/node.csr", "-subj", "/CN=node")
        sh("openssl", "ca", "-batch", "-notext", "-config", pki + "/ca.cnf",
           "-cert", pki + "/ca.crt", "-keyfile", pki + "/ca.key",
           "-extensions", "leaf", "-in", pki + "/node.csr", "-out",
           pki + "/node.crt")
        self.tls_args = ["--ca", pki + "/ca.crt", "--cert", pki + "/node.crt",
                         "--key", pki + "/node.key"]

    # -- state disks ------------------------------------------------------

    def state_disk(self, name):
        """A small tmpfs for daemon NAME's state directory, so that a fault
        can fill it. mode=0700: a state directory others may write is
        refused."""
        d = os.path.join(self.tmp, "state", name)
        os.makedirs(d)
        r = sh("mount", "-t", "tmpfs", "-o", "size=8m,mode=0700",
               "uffdd-chaos-" + name, d, check=False)
        if r.returncode != 0:
            raise SetupError("cannot mount a tmpfs: " + r.stdout.strip())
        self.mounts.append(d)
        self.undo.append(lambda d=d: sh("umount", "-l", d, check=False))
        return d

    def fill(self, d, tag):
        """Fills the state disk at D to the last block; returns the file."""
        path = os.path.join(d, "fill-" + tag)
        buf = b"\0" * 65536
        with open(path, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(buf)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
            # The last partial blocks, one page at a time.
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        return path

    # -- huge pages -------------------------------------------------------

    def reserve_huge(self, n):
        """N more huge pages of the default size in the pool, given back at
        the end (the pool's size less what was added: other tests may have
        changed it meanwhile). False when they cannot be had."""
        p = "/proc/sys/vm/nr_hugepages"
        try:
            old = int(open(p).read())
            with open(p, "w") as f:
                f.write(str(old + n))
            got = int(open(p).read()) - old
        except OSError:
            return False
        self.huge_added = max(got, 0)

        def give_back():
            try:
                now = int(open(p).read())
                with open(p, "w") as f:
                    f.write(str(max(now - self.huge_added, 0)))
            except OSError:
                pass
        self.undo.append(give_back)
        return got >= n

    def teardown(self):
        for fn in reversed(self.undo):
            try:
                fn()
            except Exception:  # cleanup goes on whatever failed
                pass
        self.undo = []
