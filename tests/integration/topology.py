"""topology.py - real Redis Cluster and Redis Sentinel deployments on
loopback for the integration tests (issue 5), built on harness.py.

RedisCluster: N masters (optionally R replicas each), one redis-server per
node on free 127.0.0.1 ports in the test's temp dir, created with
`redis-cli --cluster create` (3 masters or more) or by hand (ADDSLOTSRANGE +
CLUSTER MEET + CLUSTER REPLICATE, for 1 or 2 masters, which redis-cli
refuses). Helpers: slot of a key cross-checked with CLUSTER KEYSLOT (the
key layout itself is in slots.py), owner of a slot, moving slots live
(SETSLOT IMPORTING/MIGRATING + MIGRATE + SETSLOT NODE, or `redis-cli
--cluster reshard`), killing a master and waiting for its replica's
promotion, error statistics per node.

SentinelSet: a master, R replicas (--replicaof) and S sentinels (quorum 2),
killing the master or `SENTINEL FAILOVER` and waiting for the switch.

Every process is started with harness.spawn (killed if the test process
dies) and stopped by stop(); register the objects in DaemonTest._procs (or
use add_cluster / add_sentinels below) so tearDown kills them whatever
happens. The cluster bus port is chosen free too (`cluster-port`, Redis 7),
since port + 10000 may not exist for an ephemeral port.

Client load while a topology changes is load.py; a proxy that hides
sentinel messages is sentinel_proxy.py. Run this file to self-check the
helpers here and there (no daemon involved):
    python3 tests/integration/topology.py
"""

import os
import signal
import socket
import subprocess
import time

import harness
from harness import (REDIS_CLI, REDIS_SENTINEL, SLOW, Fatal, RedisServer, RespError, _kill,
                     free_port, spawn, wait_until)
from sentinel_proxy import SentinelProxy
from slots import NSLOTS, key_slot, user_key, users_in_slots

NODE_TIMEOUT_MS = 1000

# ---------------------------------------------------------------- small helpers

def parse_info(text):
    """INFO / CLUSTER INFO text -> {field: str}."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    out = {}
    for ln in text.splitlines():
        if ":" in ln and not ln.startswith("#"):
            k, v = ln.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def errorstats(server):
    """{"MOVED": n, "ASK": n, "NOSCRIPT": n, ...} from INFO errorstats (Redis >= 6.2)."""
    return harness.info_counts(server, "errorstats", "errorstat_", "count")


# ---------------------------------------------------------------- cluster

class ClusterNode(RedisServer):
    """One redis-server with cluster-enabled yes."""

    def __init__(self, tmpdir, port=None, password=None, node_timeout=NODE_TIMEOUT_MS,
                 full_coverage=True, extra=(), tls=None):
        port = port or free_port()
        self.bus_port = free_port()
        ex = ["--cluster-enabled", "yes",
              "--cluster-config-file", "nodes-%d.conf" % port,
              "--dbfilename", "dump-%d.rdb" % port,
              "--cluster-node-timeout", str(node_timeout),
              "--cluster-port", str(self.bus_port),
              "--cluster-require-full-coverage", "yes" if full_coverage else "no",
              # full syncs start at once (Redis 7 waits 5 s by default)
              "--repl-diskless-sync-delay", "0"]
        if password:
            ex += ["--masterauth", password]
        super().__init__(tmpdir, port=port, password=password, extra=ex + list(extra), tls=tls)
        self._id = None

    @property
    def node_id(self):
        if self._id is None:
            self._id = self.call("CLUSTER", "MYID").decode()
        return self._id

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cluster_info(self):
        return parse_info(self.call("CLUSTER", "INFO"))

    def role(self):
        """"master" or "slave" (ROLE)."""
        return self.call("ROLE")[0].decode()

    def info(self, section):
        return parse_info(self.call("INFO", section))

    def slot_map(self):
        """This node's view: a tuple of (lo, hi, "ip:port" of master,
        sorted tuple of replica "ip:port") from CLUSTER SLOTS, sorted."""
        out = []
        for ent in self.call("CLUSTER", "SLOTS"):
            lo, hi = ent[0], ent[1]
            # an empty IP means "the node you asked" (a node that never met
            # another one does not know its own address): loopback here
            nodes = ["%s:%d" % (n[0].decode() or "127.0.0.1", n[1]) for n in ent[2:]]
            out.append((lo, hi, nodes[0], tuple(sorted(nodes[1:]))))
        return tuple(sorted(out))

    def __repr__(self):
        return "<node %d%s>" % (self.port, "" if self.alive() else " dead")


class RedisCluster:
    """A real Redis Cluster on loopback. Use start(); stop() kills every node."""

    def __init__(self, tmpdir, masters=3, replicas=0, password=None,
                 node_timeout=NODE_TIMEOUT_MS, full_coverage=True, create="auto", extra=(),
                 announce_ip=True, tls=None):
        self.tmpdir = tmpdir
        self.nmasters = masters
        self.nreplicas = replicas
        self.password = password
        self.node_timeout = node_timeout
        self.create = create
        # announce_ip=False: a 1-node cluster does not know its own IP and
        # CLUSTER SLOTS gives "" for it (clients use the address they asked)
        extra = list(extra) + (["--cluster-announce-ip", "127.0.0.1"] if announce_ip else [])
        # tls: a harness.RedisTls with cluster=True (the bus and replication too)
        self.tls = tls
        self.nodes = [ClusterNode(tmpdir, password=password, node_timeout=node_timeout,
                                  full_coverage=full_coverage, extra=extra, tls=tls)
                      for _ in range(masters * (1 + replicas))]
        self.start_seconds = None

    # -- lifecycle

    def start(self, timeout=None):
        timeout = timeout or 30 * SLOW
        t0 = time.monotonic()
        try:
            for n in self.nodes:
                n.start()
            use_cli = self.create == "cli" or (self.create == "auto" and self.nmasters >= 3)
            if use_cli:
                self._create_cli(timeout)
            else:
                self._create_manual(timeout)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _create_cli(self, timeout):
        argv = [REDIS_CLI] + (self.tls.cli_args() if self.tls else [])
        if self.password:
            argv += ["--no-auth-warning", "-a", self.password]
        argv += ["--cluster", "create"] + [n.address for n in self.nodes]
        argv += ["--cluster-replicas", str(self.nreplicas), "--cluster-yes"]
        out = subprocess.run(argv, capture_output=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        text = (out.stdout + out.stderr).decode(errors="replace")
        # Its closing check can run before gossip has told every node of
        # every other ("claims to be slave of unknown node ID", slots not
        # all covered yet) and still exit 0: wait_ready, after this, is the
        # judge of a cluster that converged.
        if out.returncode != 0:
            raise AssertionError("redis-cli --cluster create failed (%d):\n%s"
                                 % (out.returncode, text))

    def _create_manual(self, timeout):
        masters = self.nodes[:self.nmasters]
        per = NSLOTS // self.nmasters
        for i, m in enumerate(masters):
            lo = i * per
            hi = NSLOTS - 1 if i == self.nmasters - 1 else (i + 1) * per - 1
            m.call("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        first = self.nodes[0]
        for n in self.nodes[1:]:
            n.call("CLUSTER", "MEET", "127.0.0.1", first.port, first.bus_port)
        wait_until(lambda: all(int(n.cluster_info()["cluster_known_nodes"]) == len(self.nodes)
                               for n in self.nodes), timeout, interval=0.05,
                   what="every node to know every other node")
        for i, r in enumerate(self.nodes[self.nmasters:]):
            m = masters[i % self.nmasters]
            mid = m.node_id
            # the replica must know the master as a node before REPLICATE
            wait_until(lambda: r.call("CLUSTER", "REPLICATE", mid) == "OK", timeout,
                       interval=0.05, what="CLUSTER REPLICATE on %d" % r.port)

    def stop(self):
        for n in self.nodes:
            try:
                n.stop()
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass

    # -- views

    def alive_nodes(self):
        return [n for n in self.nodes if n.alive()]

    def node_at(self, addr):
        for n in self.nodes:
            if n.address == addr:
                return n
        raise KeyError(addr)

    def masters(self):
        """Live nodes that are masters (ROLE) and own at least one slot."""
        owners = {ent[2] for ent in self.view()}
        return [n for n in self.alive_nodes() if n.address in owners]

    def replicas(self):
        return [n for n in self.alive_nodes() if n.role() == "slave"]

    def seeds(self):
        """Addresses of every node (the daemon's `cluster:` list)."""
        return [n.address for n in self.nodes]

    def view(self, node=None):
        """The slot map seen by `node` (default: the first live node)."""
        node = node or self.alive_nodes()[0]
        return node.slot_map()

    def owner_map(self):
        """A list of NSLOTS master addresses (None for an uncovered slot)."""
        owners = [None] * NSLOTS
        for lo, hi, master, _ in self.view():
            for s in range(lo, hi + 1):
                owners[s] = master
        return owners

    def owner(self, slot):
        """The node that serves `slot` (per the first live node's view)."""
        for lo, hi, master, _ in self.view():
            if lo <= slot <= hi:
                return self.node_at(master)
        return None

    def slots_of(self, node):
        """Sorted slots `node` serves."""
        out = []
        for lo, hi, master, _ in self.view():
            if master == node.address:
                out.extend(range(lo, hi + 1))
        return sorted(out)

    def replica_of(self, master):
        """Live replicas of `master`."""
        return [n for n in self.alive_nodes()
                if n is not master and n.info("replication").get("role") == "slave"
                and n.info("replication").get("master_port") == str(master.port)]

    def key_slot_checked(self, key):
        """Slot of key by CRC16 here, asserted equal to CLUSTER KEYSLOT."""
        mine = key_slot(key)
        theirs = self.alive_nodes()[0].call("CLUSTER", "KEYSLOT", key)
        if mine != theirs:
            raise AssertionError("slot of %r: crc16 says %d, CLUSTER KEYSLOT %d"
                                 % (key, mine, theirs))
        return mine

    def keys_by_node(self, pattern="*"):
        """{address: sorted keys} of every live master."""
        return {n.address: n.keys(pattern) for n in self.masters()}

    def errorstats(self):
        """{address: {error prefix: count}} of every live node."""
        return {n.address: errorstats(n) for n in self.alive_nodes()}

    def total_error(self, prefix, nodes=None):
        return sum(errorstats(n).get(prefix, 0) for n in (nodes or self.alive_nodes()))

    # -- readiness

    def state(self):
        """(ok, reason): every live node says cluster_state:ok, knows every
        live node, all live nodes have the same slot map covering 16384
        slots with live masters, and every live replica's link is up."""
        alive = self.alive_nodes()
        views = {}
        for n in alive:
            ci = n.cluster_info()
            if ci.get("cluster_state") != "ok":
                return False, "%d: cluster_state %s" % (n.port, ci.get("cluster_state"))
            views[n.port] = n.slot_map()
        distinct = set(views.values())
        if len(distinct) != 1:
            return False, "nodes disagree on the slot map"
        view = distinct.pop()
        covered = sum(hi - lo + 1 for lo, hi, _, _ in view)
        if covered != NSLOTS:
            return False, "%d slots covered" % covered
        live_addrs = {n.address for n in alive}
        for _, _, m, _ in view:
            if m not in live_addrs:
                return False, "slots served by dead %s" % m
        for n in alive:
            rep = n.info("replication")
            if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                return False, "%d: replica link %s" % (n.port, rep.get("master_link_status"))
            if n.role() == "master" and rep.get("role") != "master":
                return False, "%d: role mismatch" % n.port
        return True, "ok"

    def wait_ready(self, timeout=None):
        """Waits until state() is ok; returns the seconds it took."""
        timeout = timeout or 30 * SLOW
        t0 = time.monotonic()
        last = ["?"]

        def ok():
            good, why = self.state()
            last[0] = why
            return good
        try:
            wait_until(ok, timeout, interval=0.05, what="cluster ready")
        except AssertionError as e:
            raise AssertionError("%s: %s" % (e, last[0]))
        return time.monotonic() - t0

    # -- resharding

    def move_slots(self, slots, src, dst, batch=200, pause=0.0, wait=True, on_slot=None,
                   pause_slots=None):
        """Moves each slot of `slots` from src to dst while the cluster runs:
        dst SETSLOT IMPORTING, src SETSLOT MIGRATING, MIGRATE the keys in
        batches, then SETSLOT NODE on dst, src and every other master.
        pause: seconds to sleep between the MIGRATING step and the first
        MIGRATE, and after each batch, so that clients meet ASK / TRYAGAIN
        (only for the slots in pause_slots when given).
        on_slot(slot) is called after each slot is handed over. Returns the
        number of keys moved."""
        sid, did = src.node_id, dst.node_id
        others = [m for m in self.masters() if m is not src and m is not dst]
        moved = 0
        with src.resp() as rs, dst.resp() as rd:
            ro = [o.resp() for o in others]
            try:
                for slot in slots:
                    rd.call("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
                    rs.call("CLUSTER", "SETSLOT", slot, "MIGRATING", did)
                    nap = pause if pause_slots is None or slot in pause_slots else 0
                    if nap:
                        time.sleep(nap)
                    while True:
                        keys = rs.call("CLUSTER", "GETKEYSINSLOT", slot, batch)
                        if not keys:
                            break
                        argv = ["MIGRATE", "127.0.0.1", dst.port, "", 0, 5000]
                        if self.password:
                            argv += ["AUTH", self.password]
                        rs.call(*(argv + ["KEYS"] + keys))
                        moved += len(keys)
                        if nap:
                            time.sleep(nap)
                    rd.call("CLUSTER", "SETSLOT", slot, "NODE", did)
                    rs.call("CLUSTER", "SETSLOT", slot, "NODE", did)
                    for r in ro:
                        r.call("CLUSTER", "SETSLOT", slot, "NODE", did)
                    if on_slot:
                        on_slot(slot)
            finally:
                for r in ro:
                    r.close()
        if wait:
            self.wait_ready()
        return moved

    # step by step, for tests that hold a slot half-way

    def begin_migration(self, slot, src, dst):
        dst.call("CLUSTER", "SETSLOT", slot, "IMPORTING", src.node_id)
        src.call("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.node_id)

    def migrate_keys(self, src, dst, keys):
        argv = ["MIGRATE", "127.0.0.1", dst.port, "", 0, 5000]
        if self.password:
            argv += ["AUTH", self.password]
        return src.call(*(argv + ["KEYS"] + list(keys)))

    def finish_migration(self, slot, src, dst):
        """Moves what is left of the slot, then SETSLOT NODE everywhere."""
        while True:
            keys = src.call("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            self.migrate_keys(src, dst, keys)
        for n in [dst, src] + [m for m in self.masters() if m is not src and m is not dst]:
            n.call("CLUSTER", "SETSLOT", slot, "NODE", dst.node_id)

    def unassign_slot(self, slot, timeout=5.0):
        """CLUSTER DELSLOTS on every live node until every one says
        cluster_state:fail: nobody serves the slot (its keys stay where they
        are). Once is not always enough: a ping the owner sent before its
        own DELSLOTS, still in flight, makes a node that has already
        deleted the slot take the owner's claim back, and it keeps it."""
        def down():
            ok = True
            for n in self.alive_nodes():
                if n.cluster_info()["cluster_state"] == "fail":
                    continue
                ok = False
                try:
                    n.call("CLUSTER", "DELSLOTS", slot)
                except RespError:
                    pass  # already unassigned there: wait for its state to follow
            return ok
        wait_until(down, timeout, interval=0.05, what="cluster_state:fail on every node")

    def assign_slot(self, slot, node):
        """node serves the slot again; every live node is told at once."""
        node.call("CLUSTER", "ADDSLOTS", slot)
        for n in self.alive_nodes():
            if n is not node:
                n.call("CLUSTER", "SETSLOT", slot, "NODE", node.node_id)

    def reshard_cli(self, src, dst, nslots, timeout=None, wait=True):
        """`redis-cli --cluster reshard` of nslots slots from src to dst."""
        timeout = timeout or 60 * SLOW
        argv = [REDIS_CLI]
        if self.password:
            argv += ["--no-auth-warning", "-a", self.password]
        argv += ["--cluster", "reshard", src.address, "--cluster-from", src.node_id,
                 "--cluster-to", dst.node_id, "--cluster-slots", str(nslots),
                 "--cluster-yes"]
        out = subprocess.run(argv, capture_output=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        text = (out.stdout + out.stderr).decode(errors="replace")
        if out.returncode != 0 or "[ERR]" in text:
            raise AssertionError("redis-cli --cluster reshard failed (%d):\n%s"
                                 % (out.returncode, text[-3000:]))
        if wait:
            self.wait_ready()
        return text

    # -- failures

    def wait_replicated(self, master, timeout=None):
        """Writes a key owned by `master` and WAITs until every replica has
        it, so that every earlier write is on the replicas too."""
        timeout = timeout or 10 * SLOW
        slots = set(self.slots_of(master))
        i = 0
        while key_slot("sync{%d}" % i) not in slots:
            i += 1
        key = "sync{%d}" % i
        want = len(self.replica_of(master))
        with master.resp(timeout=timeout + 1) as r:
            r.call("SET", key, "1")
            got = r.call("WAIT", want, int(timeout * 1000))
            r.call("DEL", key)
        if got < want:
            raise AssertionError("only %d of %d replicas acknowledged" % (got, want))

    def kill(self, node):
        """SIGKILL, like a crash."""
        node.stop()

    def restart(self, node):
        """Starts a killed node again on its port with its nodes.conf."""
        node.start()
        return node

    def wait_failover(self, dead, timeout=None):
        """After `dead` (a master) was killed: waits until every live node
        sees all of its former slots served by one live node that says it is
        a master, and the cluster is otherwise ready. Returns (new master,
        seconds waited)."""
        timeout = timeout or 20 * SLOW
        t0 = time.monotonic()
        old = set(self.slots_of_addr_any(dead.address))
        if not old:
            raise AssertionError("%s owned no slots" % dead)
        probe = min(old)

        def promoted():
            alive = self.alive_nodes()
            owners = set()
            for n in alive:
                for lo, hi, m, _ in n.slot_map():
                    if lo <= probe <= hi:
                        owners.add(m)
            if len(owners) != 1:
                return None
            m = owners.pop()
            if m == dead.address:
                return None
            node = self.node_at(m)
            if not node.alive() or node.role() != "master":
                return None
            good, _ = self.state()
            return node if good else None
        node = wait_until(promoted, timeout, interval=0.05, what="replica promotion")
        return node, time.monotonic() - t0

    def slots_of_addr_any(self, addr):
        """Slots that some live node still maps to addr."""
        out = set()
        for n in self.alive_nodes():
            try:
                for lo, hi, m, _ in n.slot_map():
                    if m == addr:
                        out.update(range(lo, hi + 1))
            except (OSError, RespError):
                continue
        return out

    def flush_scripts(self):
        for n in self.alive_nodes():
            n.call("SCRIPT", "FLUSH")


# ---------------------------------------------------------------- sentinel

class Sentinel:
    """One redis-server in sentinel mode; its config file lives in tmpdir
    (Sentinel rewrites it)."""

    def __init__(self, tmpdir, master_name, master_port, quorum=2, down_after_ms=1000,
                 failover_timeout_ms=3000, password=None, port=None, tls=None):
        self.tmpdir = tmpdir
        self.port = port or free_port()
        self.tls = tls
        self.conf = os.path.join(tmpdir, "sentinel-%d.conf" % self.port)
        self.log_path = os.path.join(tmpdir, "sentinel-%d.log" % self.port)
        lines = ["port %d" % self.port, "bind 127.0.0.1", "daemonize no",
                 "dir %s" % tmpdir, 'logfile ""',
                 "sentinel monitor %s 127.0.0.1 %d %d" % (master_name, master_port, quorum),
                 "sentinel down-after-milliseconds %s %d" % (master_name, down_after_ms),
                 "sentinel failover-timeout %s %d" % (master_name, failover_timeout_ms),
                 "sentinel parallel-syncs %s 1" % master_name]
        if password:
            lines.append("sentinel auth-pass %s %s" % (master_name, password))
        if tls:  # TLS only: to clients, to the servers and to the other sentinels
            a = tls.server_args(self.port)
            lines += ["%s %s" % (a[i][2:], a[i + 1]) for i in range(0, len(a), 2)]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.proc = None
        self.logf = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout=None):
        timeout = timeout or 10 * SLOW
        self.logf = open(self.log_path, "ab")
        self.proc = spawn([REDIS_SENTINEL, self.conf, "--sentinel"], stdout=self.logf,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.tmpdir)

        def ready():
            if self.proc.poll() is not None:
                raise Fatal("sentinel exited: %s" % self.read_log())
            return self.call("PING") == "PONG"
        wait_until(ready, timeout, what="sentinel PING on %d" % self.port)
        harness.check_server_name(self)
        return self

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def resp(self, timeout=5.0):
        return harness.Resp(port=self.port, timeout=timeout,
                            tls=self.tls.context() if self.tls else None)

    def call(self, *args):
        with self.resp() as r:
            return r.call(*args)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        _kill(self.proc)
        if self.logf:
            self.logf.close()
            self.logf = None

    def sigstop(self):
        self.proc.send_signal(signal.SIGSTOP)

    def sigcont(self):
        self.proc.send_signal(signal.SIGCONT)


class SentinelSet:
    """A master, `replicas` replicas and `sentinels` sentinels watching it as
    `name`. stop() kills them all."""

    def __init__(self, tmpdir, replicas=1, sentinels=3, name="mymaster", password=None,
                 down_after_ms=1000, failover_timeout_ms=3000, tls=None):
        self.tmpdir = tmpdir
        self.name = name
        self.password = password
        ex = ["--repl-diskless-sync-delay", "0"]
        ex += ["--masterauth", password] if password else []
        ports = [free_port() for _ in range(1 + replicas)]
        self.master0 = RedisServer(tmpdir, port=ports[0], password=password,
                                   extra=ex + ["--dbfilename", "dump-%d.rdb" % ports[0]],
                                   tls=tls)
        self.servers = [self.master0] + [
            RedisServer(tmpdir, port=p, password=password,
                        extra=ex + ["--dbfilename", "dump-%d.rdb" % p,
                                    "--replicaof", "127.0.0.1", str(self.master0.port)],
                        tls=tls)
            for p in ports[1:]]
        self.sentinels = [Sentinel(tmpdir, name, self.master0.port, quorum=2,
                                   down_after_ms=down_after_ms,
                                   failover_timeout_ms=failover_timeout_ms, password=password,
                                   tls=tls)
                          for _ in range(sentinels)]
        self.start_seconds = None

    def addresses(self):
        """Sentinel addresses (the daemon's `sentinel.addresses`)."""
        return [s.address for s in self.sentinels]

    def start(self, timeout=None):
        timeout = timeout or 30 * SLOW
        t0 = time.monotonic()
        try:
            for s in self.servers:
                s.start()
            self.wait_links(timeout)
            for s in self.sentinels:
                s.start()
            self.wait_sentinels(self.master0, timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self):
        for p in self.sentinels + self.servers:
            try:
                p.stop()
            except Exception:  # noqa: BLE001
                pass

    def alive_servers(self):
        return [s for s in self.servers if s.proc is not None and s.proc.poll() is None]

    def server_at(self, addr):
        for s in self.servers:
            if s.address == addr:
                return s
        raise KeyError(addr)

    def role(self, server):
        return server.call("ROLE")[0].decode()

    def wait_links(self, timeout=None, master=None):
        """Every live server but the master is a replica with its link up."""
        timeout = timeout or 20 * SLOW

        def ok():
            m = master or self.master0
            for s in self.alive_servers():
                rep = parse_info(s.call("INFO", "replication"))
                if s is m:
                    if rep.get("role") != "master":
                        return False
                elif rep.get("role") != "slave" or rep.get("master_link_status") != "up" \
                        or rep.get("master_port") != str(m.port):
                    return False
            return True
        wait_until(ok, timeout, interval=0.05, what="replication links up")

    def sentinel_master(self, s):
        """SENTINEL MASTER name of sentinel s -> {field: value (str)}."""
        flat = s.call("SENTINEL", "MASTER", self.name)
        return {flat[i].decode(): flat[i + 1].decode() for i in range(0, len(flat), 2)}

    def master_addr(self, s=None):
        """SENTINEL get-master-addr-by-name of sentinel s (default: the first live)."""
        s = s or [x for x in self.sentinels if x.alive()][0]
        host, port = s.call("SENTINEL", "get-master-addr-by-name", self.name)
        return "%s:%s" % (host.decode(), port.decode())

    def wait_sentinels(self, master, timeout=None):
        """Every live sentinel names `master`, sees it up as a master with
        every live replica and knows every other live sentinel."""
        timeout = timeout or 20 * SLOW
        live = [s for s in self.sentinels if s.alive()]
        nrep = len(self.alive_servers()) - 1
        last = ["?"]

        def ok():
            for s in live:
                if self.master_addr(s) != master.address:
                    last[0] = "%d names %s" % (s.port, self.master_addr(s))
                    return False
                m = self.sentinel_master(s)
                if m["flags"] != "master" or int(m["num-slaves"]) < nrep \
                        or int(m["num-other-sentinels"]) < len(live) - 1:
                    last[0] = "%d: %s" % (s.port, {k: m[k] for k in
                                                   ("flags", "num-slaves",
                                                    "num-other-sentinels")})
                    return False
                up = [r for r in self.replicas_seen(s) if "disconnected" not in r["flags"]
                      and "s_down" not in r["flags"]]
                if len(up) < nrep:
                    last[0] = "%d sees %d replicas up" % (s.port, len(up))
                    return False
            return True
        try:
            wait_until(ok, timeout, interval=0.1, what="sentinels to agree")
        except AssertionError as e:
            raise AssertionError("%s: %s" % (e, last[0]))

    def replicas_seen(self, s):
        out = []
        for ent in s.call("SENTINEL", "REPLICAS", self.name):
            out.append({ent[i].decode(): ent[i + 1].decode() for i in range(0, len(ent), 2)})
        return out

    def current_master(self):
        return self.server_at(self.master_addr())

    def kill_master(self):
        """SIGKILLs the current master; returns it."""
        m = self.current_master()
        m.stop()
        return m

    def wait_failover(self, old, timeout=None):
        """Waits until every live sentinel names a live master other than
        `old`, and that server says it is a master. Returns (new master,
        seconds)."""
        timeout = timeout or 30 * SLOW
        t0 = time.monotonic()

        def switched():
            addrs = {self.master_addr(s) for s in self.sentinels if s.alive()}
            if len(addrs) != 1:
                return None
            a = addrs.pop()
            if a == old.address:
                return None
            srv = self.server_at(a)
            if srv.proc.poll() is not None or self.role(srv) != "master":
                return None
            return srv
        srv = wait_until(switched, timeout, interval=0.05, what="sentinel failover")
        return srv, time.monotonic() - t0

    def manual_failover(self, sentinel=None):
        """SENTINEL FAILOVER (the master is alive and will be demoted)."""
        s = sentinel or [x for x in self.sentinels if x.alive()][0]
        return s.call("SENTINEL", "FAILOVER", self.name)

    def wait_demoted(self, old, new, timeout=None):
        """Waits until `old` is a replica of `new` with its link up."""
        timeout = timeout or 30 * SLOW

        def ok():
            rep = parse_info(old.call("INFO", "replication"))
            return rep.get("role") == "slave" and rep.get("master_port") == str(new.port) \
                and rep.get("master_link_status") == "up"
        wait_until(ok, timeout, interval=0.05, what="old master demoted to replica")

    def wait_replicated(self, master=None, timeout=None):
        """SET + WAIT on the master: every replica has every earlier write."""
        timeout = timeout or 10 * SLOW
        master = master or self.current_master()
        want = len(self.alive_servers()) - 1
        with master.resp(timeout=timeout + 1) as r:
            r.call("SET", "sync-probe", "1")
            got = r.call("WAIT", want, int(timeout * 1000))
            r.call("DEL", "sync-probe")
        if got < want:
            raise AssertionError("only %d of %d replicas acknowledged" % (got, want))


# ---------------------------------------------------------------- for DaemonTest

def add_cluster(test, **kw):
    """Starts a RedisCluster in test.tmpdir, stopped in tearDown."""
    c = RedisCluster(test.tmpdir, **kw)
    test._procs.append(c)
    return c.start()


def add_sentinels(test, **kw):
    s = SentinelSet(test.tmpdir, **kw)
    test._procs.append(s)
    return s.start()


def cluster_redis_opts(cluster, timeout="1s", **extra):
    """The daemon's `redis:` mapping for a cluster (seed list in flow style)."""
    d = {"cluster": "[%s]" % ", ".join(cluster.seeds()), "timeout": timeout}
    d.update(extra)
    return d


def sentinel_redis_opts(addresses, name="mymaster", timeout="1s", **extra):
    d = {"sentinel": "{master: %s, addresses: [%s]}" % (name, ", ".join(addresses)),
         "timeout": timeout}
    d.update(extra)
    return d


def cluster_config(listen_port, cluster, policies, timeout="1s", redis_extra=None, **top):
    """Full YAML for a daemon against a cluster; listen_port is admin."""
    ropts = cluster_redis_opts(cluster, timeout=timeout, **(redis_extra or {}))
    return harness.make_config(["127.0.0.1:%d" % listen_port], ropts, policies, **top)


# ---------------------------------------------------------------- self-check

def self_check(verbose=True):
    """Starts a 3+3 cluster, checks slots, moves slots both ways (by hand
    with keys, and with redis-cli), fails a master over, tears down; then
    a sentinel set with a kill and a manual failover, and a proxy that hides
    +switch-master. Prints timings; raises on any problem."""
    import shutil
    import tempfile

    def say(*a):
        if verbose:
            print(*a, flush=True)

    tmp = tempfile.mkdtemp(prefix="rlcl-")
    t_all = time.monotonic()
    c = RedisCluster(tmp, masters=3, replicas=1, full_coverage=False)
    try:
        c.start()
        say("cluster 3+3 ready in %.2fs" % c.start_seconds)
        for k in (b"123456789", b"rl:{reply:alice}:s60000", b"{}x", b"a{}{b}", b"{a}{b}",
                  b"rl:{up:%7D%25}:f", b"\xff\x00{\x80}"):
            c.key_slot_checked(k)
        assert key_slot(b"123456789") == 12739
        masters = c.masters()
        assert len(masters) == 3, masters
        assert len(c.replicas()) == 3
        a, b = masters[0], masters[1]
        slots_a = c.slots_of(a)
        users = users_in_slots("t", set(slots_a[:50]), 40)
        r = a.resp()
        for u in users:
            r.call("SET", user_key("t", u, "s60000"), u)
        r.close()
        t = time.monotonic()
        n = c.move_slots(slots_a[:50], a, b, pause=0.001)
        say("moved 50 slots (%d keys) by hand in %.2fs" % (n, time.monotonic() - t))
        assert n == 40, n
        for u in users:
            k = user_key("t", u, "s60000")
            assert c.owner(key_slot(k)) is b
            assert b.call("GET", k) == u.encode()
        assert set(slots_a[:50]) <= set(c.slots_of(b))
        try:
            a.call("GET", user_key("t", users[0], "s60000"))
            raise AssertionError("no MOVED from the old owner")
        except RespError as e:
            assert str(e).startswith("MOVED "), e
        assert errorstats(a).get("MOVED", 0) >= 1
        t = time.monotonic()
        c.reshard_cli(b, a, 100)
        say("redis-cli reshard of 100 slots in %.2fs" % (time.monotonic() - t))
        c.wait_replicated(masters[2])
        victim = masters[2]
        vslots = set(c.slots_of(victim))
        c.kill(victim)
        new, secs = c.wait_failover(victim)
        say("failover of a killed master: %s promoted in %.2fs" % (new, secs))
        assert set(c.slots_of(new)) == vslots
        c.restart(victim)
        c.wait_ready()
        assert victim.role() == "slave"
        say("killed master back as a replica")
    finally:
        c.stop()
    c1 = RedisCluster(tmp, masters=1)
    try:
        c1.start()
        say("1-node cluster ready in %.2fs" % c1.start_seconds)
        assert len(c1.view()) == 1
    finally:
        c1.stop()

    s = SentinelSet(tmp, replicas=2, sentinels=3)
    proxy = None
    try:
        s.start()
        say("sentinel set (1+2, 3 sentinels) ready in %.2fs" % s.start_seconds)
        old = s.current_master()
        old.call("SET", "k", "v")
        s.wait_replicated()
        s.kill_master()
        new, secs = s.wait_failover(old)
        say("sentinel failover after a kill: %s in %.2fs" % (new.address, secs))
        assert new.call("GET", "k") == b"v"
        proxy = SentinelProxy(s.sentinels[0].port)
        sub = harness.Resp(port=proxy.port)
        sub.call("PING")
        sub.sock.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n")
        assert sub.read_reply()[0] == b"subscribe"
        plain = s.sentinels[1].resp()
        plain.sock.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n")
        assert plain.read_reply()[0] == b"subscribe"
        # the two replicas: one is the new master, the other follows it
        s.wait_links(master=new)
        s.wait_sentinels(new)
        t = time.monotonic()
        s.manual_failover()
        newer, secs = s.wait_failover(new)
        s.wait_demoted(new, newer)
        say("SENTINEL FAILOVER: %s in %.2fs, old master demoted after %.2fs"
            % (newer.address, secs, time.monotonic() - t))
        try:
            new.call("SET", "k", "w")
            raise AssertionError("a demoted master accepted a write")
        except RespError as e:
            assert str(e).startswith("READONLY"), e
        msg = plain.read_reply()
        assert msg[0] == b"message" and msg[1] == b"+switch-master", msg
        wait_until(lambda: proxy.dropped, 5, what="proxy to drop +switch-master")
        sub.sock.settimeout(0.3)
        try:
            got = sub.read_reply()
            raise AssertionError("proxy let through %r" % (got,))
        except socket.timeout:
            pass
        say("proxy hid %d +switch-master message(s)" % len(proxy.dropped))
        sub.close()
        plain.close()
    finally:
        if proxy:
            proxy.stop()
        s.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    say("self-check OK in %.1fs" % (time.monotonic() - t_all))


if __name__ == "__main__":
    self_check()
