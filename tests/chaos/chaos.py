#!/usr/bin/env python3
"""chaos.py - ratelimitd under network faults, the way Jepsen measures
databases (issue 31): every process on a host of its own (a network
namespace joined to the others through a bridge), faults between hosts
(nftables drops and random loss, a delaying proxy, SIGKILL, SIGSTOP, a
clock set ahead or stepped), load from a client host through two daemons, every
request recorded, and a checker that reads the history:

  (a) every reply within redis.timeout plus a margin (LATE_MARGIN_S);
  (b) per key, allowed <= limit, or within the bound the checker computes
      for a fault that loses counts (the allowed answers given while the
      failed-over master's writes could be lost), reported apart;
  (c) every fallback answer (remaining -1) counted in the daemons' metrics;
  (d) no request answered twice or never.

Usage: chaos.py [--short] [--json FILE] [SCENARIO...]    (root: namespaces)
Prints one table row per scenario; exit status 1 when a check fails.
Only namespaces named rlc<pid>-* and the 10.213.N.0/24 addresses this run
gives them are touched; everything is removed on exit, failure included.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
RATELIMITD = os.environ.get("RATELIMITD", os.path.join(SRC, "build", "ratelimitd"))
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

LIMIT = 20              # policy q: 20 an hour, a sliding log: no window edge in a run
KEYS = 200              # keys asked, uniformly: near their limits by the end
TIMEOUT_MS = 200        # redis.timeout
WAIT_TIMEOUT_MS = 50    # redis.wait_timeout, durable scenarios
SLOW = float(os.environ.get("RL_SLOW", "1"))  # a sanitizer build: wider margins
LATE_MARGIN_S = 0.4 * SLOW  # (a): reply within timeout + this
NEVER_S = 5.0           # a reply later than this is "never"
RUN = "rlc%d" % (os.getpid() % 100000)
NET = "10.213.%d" % (20 + os.getpid() % 200)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ hosts

class Net:
    """Hosts in network namespaces, one bridge joining them, nftables in
    each host to cut, or lose packets to, another."""

    def __init__(self, names, tmp):
        self.tmp = tmp
        self.hosts = {}
        self.procs = []
        self.hub = RUN + "-hub"
        self._ns(self.hub)
        self._ip(self.hub, "link", "add", "br0", "type", "bridge")
        self._ip(self.hub, "link", "set", "br0", "up")
        for i, n in enumerate(names):
            self.add(n, i + 1)

    @staticmethod
    def _run(argv, check=True):
        r = subprocess.run(argv, capture_output=True, timeout=20)
        if check and r.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(argv), r.stderr.decode(errors="replace")))
        return r

    def _ns(self, ns):
        self._run(["ip", "netns", "add", ns])

    def _ip(self, ns, *args):
        self._run(["ip", "-n", ns] + list(args))

    def add(self, name, n):
        ns = "%s-%s" % (RUN, name)
        self._ns(ns)
        peer = "v%d" % n
        self._run(["ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
                   peer, "netns", self.hub])
        self._ip(self.hub, "link", "set", peer, "master", "br0", "up")
        self._ip(ns, "addr", "add", "%s.%d/24" % (NET, n), "dev", "eth0")
        self._ip(ns, "link", "set", "eth0", "up")
        self._ip(ns, "link", "set", "lo", "up")
        self.hosts[name] = (ns, "%s.%d" % (NET, n))
        self.nft(name, "add table inet chaos",
                 "add chain inet chaos in { type filter hook input priority 0 ; }",
                 "add chain inet chaos out { type filter hook output priority 0 ; }")

    def ip(self, name):
        return self.hosts[name][1]

    def spawn(self, name, argv, logname, env=None):
        f = open(os.path.join(self.tmp, logname), "ab")
        p = subprocess.Popen(["ip", "netns", "exec", self.hosts[name][0]] + argv, stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
        self.procs.append(p)
        return p

    def nft(self, name, *cmds):
        for c in cmds:
            self._run(["ip", "netns", "exec", self.hosts[name][0], "nft"] + c.split())

    def cut(self, a, b):
        """No packet between hosts a and b, either way."""
        for x, y in ((a, b), (b, a)):
            self.nft(x, "add rule inet chaos out ip daddr %s drop" % self.ip(y),
                     "add rule inet chaos in ip saddr %s drop" % self.ip(y))

    def lose(self, a, b, pct):
        """pct% of packets between a and b dropped, each way, at random."""
        for x, y in ((a, b), (b, a)):
            self.nft(x, "add rule inet chaos out ip daddr %s numgen random mod 100 < %d drop"
                     % (self.ip(y), pct))

    def heal(self):
        for name in self.hosts:
            self.nft(name, "flush chain inet chaos in", "flush chain inet chaos out")

    def close(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for ns, _ in list(self.hosts.values()) + [(self.hub, None)]:
            pids = self._run(["ip", "netns", "pids", ns], check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for ns, _ in list(self.hosts.values()) + [(self.hub, None)]:
            self._run(["ip", "netns", "del", ns], check=False)


# ------------------------------------------------------------------ topology

CLUSTER_NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]


class Topology:
    """master m (port 6379), replica r1, sentinels s1..s3, daemons d1 d2,
    the client host c. mode single: m alone, the daemons through a proxy
    on m's host (the delay scenarios). mode cluster: a Redis Cluster of
    n1..n6 (3 masters with a replica each) instead of m, r1 and sentinels."""

    def __init__(self, tmp, mode, durable=False, clock=None):
        self.tmp = tmp
        self.mode = mode
        names = ["c", "d1", "d2"] + (
            CLUSTER_NODES if mode == "cluster" else
            ["m"] + (["r1", "s1", "s2", "s3"] if mode == "sentinel" else []))
        self.net = Net(names, tmp)
        self.procs = {}
        self.delay_file = os.path.join(tmp, "delay")
        with open(self.delay_file, "w") as f:
            f.write("0 0\n")
        if mode == "cluster":
            self.cluster()
        else:
            self.redis("m")
        if mode == "cluster":
            pass
        elif mode == "sentinel":
            self.redis("r1", replicaof="m")
            self.wait_synced()
            for s in ("s1", "s2", "s3"):
                self.sentinel(s)
            # a failover needs each sentinel to know the others and the replica
            self.wait(self.sentinels_ready, 20, "sentinels knowing each other")
        else:
            self.procs["proxy"] = self.net.spawn(
                "m", [sys.executable, os.path.abspath(__file__), "--proxy",
                      "%s:6380" % self.net.ip("m"), "127.0.0.1:6379", self.delay_file],
                "proxy.log")
        for d in ("d1", "d2"):
            self.daemon(d, durable, clock if d == "d2" else None)

    # -- processes
    def redis(self, host, replicaof=None, extra=()):
        argv = [REDIS_SERVER, "--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no",
                "--save", "", "--appendonly", "no", "--dir", self.tmp,
                "--dbfilename", "dump-%s.rdb" % host, "--repl-diskless-sync-delay", "0",
                "--logfile", ""] + list(extra)
        if replicaof:
            argv += ["--replicaof", self.net.ip(replicaof), "6379"]
        self.procs[host] = self.net.spawn(host, argv, "redis-%s.log" % host)
        self.wait(lambda: self.call(host, 6379, "PING") == "PONG", 10, "redis on " + host)

    def cluster(self):
        for n in CLUSTER_NODES:
            self.redis(n, extra=["--cluster-enabled", "yes", "--cluster-config-file",
                                 "nodes-%s.conf" % n, "--cluster-node-timeout", "1000",
                                 "--cluster-announce-ip", self.net.ip(n)])
        r = subprocess.run(
            ["ip", "netns", "exec", self.net.hosts["c"][0], "redis-cli", "--cluster", "create"]
            + ["%s:6379" % self.net.ip(n) for n in CLUSTER_NODES]
            + ["--cluster-replicas", "1", "--cluster-yes"], capture_output=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("redis-cli --cluster create: %s" % r.stdout.decode()[-500:])
        self.wait(lambda: all("cluster_state:ok" in (self.call(n, 6379, "CLUSTER", "INFO") or "")
                              for n in CLUSTER_NODES), 30, "cluster state ok")

    def cluster_nodes(self):
        """{host: (role, master host or None)} as n2 sees the cluster."""
        by_ip = {self.net.ip(n): n for n in CLUSTER_NODES}
        ids, out = {}, {}
        text = self.call("n2", 6379, "CLUSTER", "NODES") or ""
        rows = [ln.split() for ln in text.splitlines() if ln.strip()]
        for w in rows:
            ids[w[0]] = by_ip.get(w[1].split(":")[0])
        for w in rows:
            host = ids[w[0]]
            role = "master" if "master" in w[2].split(",") else "slave"
            out[host] = (role, ids.get(w[3]) if w[3] != "-" else None)
        return out

    def sentinel(self, host):
        conf = os.path.join(self.tmp, "sentinel-%s.conf" % host)
        with open(conf, "w") as f:
            f.write("port 26379\nbind 0.0.0.0\nprotected-mode no\ndaemonize no\n"
                    "dir %s\nlogfile \"\"\n" % self.tmp +
                    "sentinel monitor m %s 6379 2\n" % self.net.ip("m") +
                    "sentinel down-after-milliseconds m 1000\n"
                    "sentinel failover-timeout m 3000\nsentinel parallel-syncs m 1\n")
        self.procs[host] = self.net.spawn(host, [REDIS_SERVER, conf, "--sentinel"],
                                          "sentinel-%s.log" % host)
        self.wait(lambda: self.call(host, 26379, "PING") == "PONG", 10, "sentinel " + host)

    def daemon(self, host, durable, clock):
        if self.mode == "cluster":
            redis = "{cluster: [%s], timeout: %dms%s}" % (
                ", ".join("%s:6379" % self.net.ip(n) for n in CLUSTER_NODES[:3]), TIMEOUT_MS,
                ", wait_replicas: 1, wait_timeout: %dms" % WAIT_TIMEOUT_MS if durable else "")
        elif self.mode == "sentinel":
            redis = "{sentinel: {master: m, addresses: [%s]}, timeout: %dms%s}" % (
                ", ".join("%s:26379" % self.net.ip(s) for s in ("s1", "s2", "s3")),
                TIMEOUT_MS,
                ", wait_replicas: 1, wait_timeout: %dms" % WAIT_TIMEOUT_MS if durable else "")
        else:
            redis = "{address: \"%s:6380\", timeout: %dms}" % (self.net.ip("m"), TIMEOUT_MS)
        conf = os.path.join(self.tmp, "%s.yaml" % host)
        with open(conf, "w") as f:
            f.write("listen: [\"0.0.0.0:7379\"]\nredis: %s\n" % redis +
                    "metrics: {listen: \"0.0.0.0:9100\"}\n"
                    "policies:\n  q: {limits: [%d/1h], on_store_error: deny}\n" % LIMIT)
        env = dict(os.environ)
        if clock == "file":  # stepped during the run: the fault writes the file
            self.clock_file = os.path.join(self.tmp, "faketime")
            with open(self.clock_file, "w") as f:
                f.write("+0\n")
            env.update(LD_PRELOAD=LIBFAKETIME, FAKETIME_TIMESTAMP_FILE=self.clock_file,
                       FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_NO_CACHE="1")
        elif clock:  # the daemon's host clock set ahead and running fast
            env.update(LD_PRELOAD=LIBFAKETIME, FAKETIME=clock,
                       FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_NO_CACHE="1")
        self.procs[host] = self.net.spawn(host, [RATELIMITD, "-c", conf], "%s.log" % host,
                                          env=env)
        self.wait(lambda: re.match(r"ALLOWED \d+ \d+ ",
                                   self.line(host, "PEEK ready q") or ""), 15,
                  "decisions through " + host)

    # -- talking to the hosts (from the client host, by a helper process)
    def call(self, host, port, *args):
        return self._client(["--call", "%s:%d" % (self.net.ip(host), port)] + list(args))

    def line(self, host, text):
        return self._client(["--line", "%s:7379" % self.net.ip(host), text])

    def _client(self, args):
        r = subprocess.run(["ip", "netns", "exec", self.net.hosts["c"][0], sys.executable,
                            os.path.abspath(__file__)] + args, capture_output=True, timeout=20)
        return r.stdout.decode().strip() if r.returncode == 0 else None

    @staticmethod
    def wait(fn, timeout, what):
        t = time.monotonic() + timeout
        while time.monotonic() < t:
            if fn():
                return
            time.sleep(0.1)
        raise RuntimeError("timed out waiting for " + what)

    def wait_synced(self):
        self.wait(lambda: "state=online" in (self.call("m", 6379, "INFO", "replication") or ""),
                  15, "replica online")
        self.wait(lambda: self.call("m", 6379, "SETWAIT") == "1", 15, "replica acknowledging")

    def sentinels_ready(self):
        for s in ("s1", "s2", "s3"):
            r = self.call(s, 26379, "SENTINEL", "MASTER", "m") or ""
            w = r.split()
            info = dict(zip(w[::2], w[1::2]))
            if info.get("num-other-sentinels") != "2" or info.get("num-slaves") != "1":
                return False
        return True

    def role(self, host):
        r = self.call(host, 6379, "ROLE")
        return r.split()[0] if r else None

    def sentinel_master(self):
        return self.call("s1", 26379, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m")

    def metrics(self):
        """Fallback answers each daemon counted so far."""
        out = {}
        for d in ("d1", "d2"):
            text = self._client(["--metrics", "%s:9100" % self.net.ip(d)]) or ""
            out[d] = sum(float(m.group(1)) for m in re.finditer(
                r'^ratelimitd_decisions_total\{[^}]*source="fallback"[^}]*\} (\S+)', text, re.M))
        return out

    def close(self):
        self.net.close()


# ------------------------------------------------------------------ load

def load(daemons, seconds, rate, prefix, out, seed):
    """Runs in the client host: paced ALLOWs from 8 connections per daemon
    on KEYS keys for `seconds`; writes the history as JSON lines."""
    rng = random.Random(seed)
    conns = [(d, i) for d in daemons for i in range(8)]
    per = rate / len(conns)
    records, extra = [], [0]
    lock = threading.Lock()
    start = time.monotonic()

    def worker(addr, idx, wseed):
        r = random.Random(wseed)
        host, port = addr.split(":")
        s = socket.create_connection((host, int(port)), timeout=NEVER_S)
        buf = b""
        mine = []
        n = 0
        while True:
            due = start + n / per
            now = time.monotonic()
            if due < now - 0.05:  # behind (slow replies): skip, do not burst after
                n = int((now - start) * per)
                due = start + n / per
            # the run ends on time: a slow daemon gets fewer requests, not more time
            if max(due, now) - start >= seconds:
                break
            if due > now:
                time.sleep(due - now)
            n += 1
            key = "%sk%d" % (prefix, r.randrange(KEYS))
            t0 = time.monotonic()
            s.sendall(("ALLOW %s q\n" % key).encode())
            reply = None
            try:
                while b"\n" not in buf:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                if b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    reply = line.decode()
                    if buf:  # a reply nobody asked for yet: answered twice
                        with lock:
                            extra[0] += buf.count(b"\n")
                        buf = b""
            except socket.timeout:
                pass
            mine.append((addr, key, t0, time.monotonic(), reply))
            if reply is None:  # never answered: the connection is unusable
                break
        s.settimeout(0.3)
        try:
            more = s.recv(4096)
            with lock:
                extra[0] += (buf + more).count(b"\n")
        except (socket.timeout, OSError):
            pass
        s.close()
        with lock:
            records.extend(mine)

    threads = [threading.Thread(target=worker, args=(a, i, rng.random())) for a, i in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out, "w") as f:
        json.dump({"start": start, "extra": extra[0], "records": records}, f)


# ------------------------------------------------------------------ checker

def parse(reply):
    """(verdict, fallback) of a decision line."""
    w = (reply or "").split()
    if len(w) == 5 and w[0] in ("ALLOWED", "DENIED"):
        return w[0], w[2] == "-1"
    return None, False


def check(hist, unsafe, metrics_delta, durable=False):
    """The four checks over one scenario's history. unsafe: (t0, t1) during
    which a master's writes could be lost (the bound counts allowed answers
    sent then), or None. durable (redis.wait_replicas): no over-admission at
    all, whatever the bound."""
    recs = hist["records"]
    allowed, bound = {}, {}
    late = never = fallbacks = bad = 0
    for addr, key, t0, t1, reply in recs:
        if reply is None:
            never += 1
            continue
        if t1 - t0 > TIMEOUT_MS / 1000 + LATE_MARGIN_S:
            late += 1
        v, fb = parse(reply)
        if v is None:
            bad += 1
            continue
        fallbacks += fb
        if v == "ALLOWED" and not fb:
            allowed[key] = allowed.get(key, 0) + 1
            if unsafe and unsafe[0] <= t0 <= unsafe[1]:
                bound[key] = bound.get(key, 0) + 1
    over = {k: a - LIMIT for k, a in allowed.items() if a > LIMIT}
    beyond = {k: o for k, o in over.items() if o > (0 if durable else bound.get(k, 0))}
    return {
        "requests": len(recs), "late": late, "never": never, "twice": hist["extra"],
        "bad": bad, "fallbacks": fallbacks, "fallbacks_counted": int(metrics_delta),
        "allowed": sum(allowed.values()), "over": sum(over.values()),
        "bound": sum(bound.values()), "beyond_bound": sum(beyond.values()),
        "ok": late == 0 and never == 0 and hist["extra"] == 0 and bad == 0
        and not beyond and fallbacks == int(metrics_delta),
    }


# ------------------------------------------------------------------ scenarios

def run_scenario(name, spec, tmp, seconds):
    """Builds the topology, runs the load with the fault in its middle,
    returns the checker's figures."""
    topo = Topology(tmp, spec.get("mode", "sentinel"), spec.get("durable", False),
                    spec.get("clock"))
    try:
        m0 = topo.metrics()
        out = os.path.join(tmp, "history.json")
        loader = subprocess.Popen(
            ["ip", "netns", "exec", topo.net.hosts["c"][0], sys.executable,
             os.path.abspath(__file__), "--load", ",".join(
                 "%s:7379" % topo.net.ip(d) for d in ("d1", "d2")),
             str(seconds), str(spec.get("rate", 600)), name + ":", out,
             str(hash(name) & 0xffff)],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "load.log"), "ab"))
        t_start = time.monotonic()
        time.sleep(seconds * 0.3)
        unsafe = None
        fault = spec.get("fault")
        t_fault = time.monotonic()
        if fault:
            unsafe = fault(topo, seconds)
        loader.wait(seconds + 30)
        hist = json.load(open(out))
        m1 = topo.metrics()
        delta = sum(m1[d] - m0[d] for d in m1)
        res = check(hist, unsafe, delta, spec.get("durable", False))
        res["fault_at"] = round(t_fault - t_start, 1)
        return res
    finally:
        topo.close()


def after(seconds):
    time.sleep(seconds)


def f_loss(pct):
    def fault(t, secs):
        t.net.lose("d1", "m", pct)
        t.net.lose("d2", "m", pct)
        after(secs * 0.4)
        t.net.heal()
    return fault


def f_delay(ms, jitter):
    def fault(t, secs):
        with open(t.delay_file, "w") as f:
            f.write("%d %d\n" % (ms, jitter))
        after(secs * 0.4)
        with open(t.delay_file, "w") as f:
            f.write("0 0\n")
    return fault


def f_cut_daemon(t, secs):
    t.net.cut("d1", "m")
    after(secs * 0.3)
    t.net.heal()


def wait_switched(t, old_ip):
    t.wait(lambda: (t.sentinel_master() or old_ip).split()[0] != old_ip, 30, "failover")


def f_cut_master(t, secs):
    """The master cut from its replica and the sentinels, not from the
    daemons: it takes writes until it is demoted, after the heal."""
    t0 = time.monotonic()
    for h in ("r1", "s1", "s2", "s3"):
        t.net.cut("m", h)
    wait_switched(t, t.net.ip("m"))
    after(0.5)
    t.net.heal()
    t.wait(lambda: t.role("m") == "slave", 30, "old master demoted")
    return (t0, time.monotonic())


def f_kill_master(t, secs):
    t0 = time.monotonic()
    os.killpg(t.procs["m"].pid, signal.SIGKILL)
    wait_switched(t, t.net.ip("m"))
    # what was not replicated at the kill: sent in the last replication
    # round trip before it (a fraction of a millisecond on this bridge)
    return (t0 - 0.05, t0)


def f_stop_master(t, secs):
    t0 = time.monotonic()
    os.killpg(t.procs["m"].pid, signal.SIGSTOP)
    wait_switched(t, t.net.ip("m"))
    os.killpg(t.procs["m"].pid, signal.SIGCONT)
    t.wait(lambda: t.role("m") == "slave", 30, "old master demoted")
    return (t0, time.monotonic())


def f_clock_steps(t, secs):
    """d2's clock stepped back 2 hours, then 2 hours ahead of the truth."""
    for step in ("-2h", "+2h", "+0"):
        with open(t.clock_file, "w") as f:
            f.write(step + "\n")
        after(secs * 0.15)


def f_cut_sentinel(t, secs):
    for h in ("m", "r1", "d1", "d2", "s2", "s3"):
        t.net.cut("s1", h)
    after(secs * 0.4)
    t.net.heal()


def cluster_promoted(t, old):
    """Until old's replica is a master in n2's view (n2: never the one cut)."""
    t.wait(lambda: t.cluster_nodes().get(old, ("master",))[0] == "slave" or any(
        r == "master" and h != old and h in t.replica_hosts for h, (r, _) in
        t.cluster_nodes().items()), 30, "the replica of %s promoted" % old)


def f_cluster_kill(t, secs):
    t.replica_hosts = [h for h, (r, m) in t.cluster_nodes().items() if m == "n1"]
    t0 = time.monotonic()
    os.killpg(t.procs["n1"].pid, signal.SIGKILL)
    cluster_promoted(t, "n1")
    return (t0 - 0.05, t0)


def f_cluster_cut(t, secs):
    """n1, a master, cut from every other node, not from the daemons: the
    majority fails it over; it stops taking writes after the node timeout
    and is demoted once healed."""
    t.replica_hosts = [h for h, (r, m) in t.cluster_nodes().items() if m == "n1"]
    t0 = time.monotonic()
    for n in CLUSTER_NODES[1:]:
        t.net.cut("n1", n)
    cluster_promoted(t, "n1")
    after(0.5)
    t.net.heal()
    t.wait(lambda: t.role("n1") == "slave", 30, "n1 demoted")
    return (t0, time.monotonic())


def f_cluster_reshard(t, secs):
    nodes = t.call("n2", 6379, "CLUSTER", "MYID")
    to = t.call("n3", 6379, "CLUSTER", "MYID")
    r = subprocess.run(
        ["ip", "netns", "exec", t.net.hosts["c"][0], "redis-cli", "--cluster", "reshard",
         "%s:6379" % t.net.ip("n2"), "--cluster-from", nodes, "--cluster-to", to,
         "--cluster-slots", "1000", "--cluster-yes"], capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("reshard: %s" % r.stdout.decode()[-500:])


SCENARIOS = {
    "baseline": {},
    "loss-10": {"fault": f_loss(10)},
    "loss-30": {"fault": f_loss(30)},
    "delay-50ms": {"mode": "single", "fault": f_delay(50, 20)},
    "delay-500ms": {"mode": "single", "fault": f_delay(500, 100)},
    "cut-daemon-master": {"fault": f_cut_daemon},
    "cut-master": {"fault": f_cut_master},
    "cut-master-durable": {"fault": f_cut_master, "durable": True},
    "kill-master": {"fault": f_kill_master},
    "kill-master-durable": {"fault": f_kill_master, "durable": True},
    "stop-master": {"fault": f_stop_master},
    "stop-master-durable": {"fault": f_stop_master, "durable": True},
    "cut-sentinel": {"fault": f_cut_sentinel},
    "clock-ahead": {"clock": "+1h x1.5"},
    "clock-steps": {"clock": "file", "fault": f_clock_steps},
    "cluster-baseline": {"mode": "cluster"},
    "cluster-kill-master": {"mode": "cluster", "fault": f_cluster_kill},
    "cluster-cut-master": {"mode": "cluster", "fault": f_cluster_cut},
    "cluster-cut-master-durable": {"mode": "cluster", "fault": f_cluster_cut, "durable": True},
    "cluster-reshard": {"mode": "cluster", "fault": f_cluster_reshard},
}
SHORT = ["baseline", "loss-30", "cut-master", "cut-master-durable", "delay-500ms"]
SHORT_SLOW = ["loss-30", "cut-master-durable", "kill-master"]  # sanitizers: fewer


# ------------------------------------------------------------------ helpers run in a host

def proxy(listen, target, control):
    """A TCP proxy adding control's "delay_ms jitter_ms" to every chunk, in
    order, both ways (the kernel here has no netem)."""
    lh, lp = listen.split(":")
    th, tp = target.split(":")
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((lh, int(lp)))
    srv.listen(64)

    def delay():
        try:
            d, j = open(control).read().split()
            return (int(d) + random.uniform(-int(j), int(j))) / 1000.0
        except (OSError, ValueError):
            return 0.0

    def pump(a, b):
        import queue
        q = queue.Queue()

        def sender():
            while True:
                due, data = q.get()
                if data is None:
                    break
                w = due - time.monotonic()
                if w > 0:
                    time.sleep(w)
                try:
                    b.sendall(data)
                except OSError:
                    break
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        threading.Thread(target=sender, daemon=True).start()
        last = 0.0
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                data = b""
            if not data:
                q.put((0, None))
                return
            last = max(last, time.monotonic() + max(0.0, delay()))
            q.put((last, data))

    while True:
        c, _ = srv.accept()
        u = socket.create_connection((th, int(tp)))
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


def tool_call(addr, args):
    host, port = addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=3)
    f = s.makefile("rb")

    def send(*a):
        s.sendall(("*%d\r\n" % len(a)).encode() + b"".join(
            b"$%d\r\n%s\r\n" % (len(x.encode()), x.encode()) for x in a))

    def read():
        line = f.readline().rstrip(b"\r\n")
        t, rest = line[:1], line[1:].decode()
        if t in (b"+", b"-", b":"):
            return rest
        if t == b"$":
            n = int(rest)
            return "" if n < 0 else f.read(n + 2)[:-2].decode()
        if t == b"*":
            n = int(rest)
            return " ".join(read() for _ in range(max(n, 0)))
        return ""
    if args == ["SETWAIT"]:  # one connection: WAIT counts its own write
        send("SET", "chaos-probe", "1")
        read()
        send("WAIT", "1", "1000")
    else:
        send(*args)
    print(read())


def tool_line(addr, text):
    host, port = addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=3)
    s.sendall((text + "\n").encode())
    print(s.makefile("rb").readline().decode().strip())


def tool_metrics(addr):
    host, port = addr.split(":")
    s = socket.create_connection((host, int(port)), timeout=3)
    s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        data += c
    print(data.decode(errors="replace"))


# ------------------------------------------------------------------ main

def reap_stale():
    """Namespaces an earlier run left (it was SIGKILLed): rlc<pid>-* whose
    run (a chaos.py of that pid) is gone. Their processes are killed and
    the namespaces deleted; a run still going is left alone."""
    runs = {int(p) % 100000 for p in os.listdir("/proc") if p.isdigit() and _is_chaos(p)}
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=20)
    for line in r.stdout.decode().splitlines():
        m = re.match(r"(rlc(\d+)-\S+)", line)
        if not m or int(m.group(2)) in runs:
            continue
        ns = m.group(1)
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              timeout=20).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        log("chaos: removed %s, left by an earlier run" % ns)


def _is_chaos(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return b"chaos.py" in f.read()
    except OSError:
        return False


def main():
    if len(sys.argv) > 1 and sys.argv[1].startswith("--") and sys.argv[1] in (
            "--proxy", "--call", "--line", "--metrics", "--load"):
        cmd, args = sys.argv[1], sys.argv[2:]
        if cmd == "--proxy":
            proxy(*args)
        elif cmd == "--call":
            tool_call(args[0], args[1:])
        elif cmd == "--line":
            tool_line(*args)
        elif cmd == "--metrics":
            tool_metrics(*args)
        else:
            import faulthandler  # a hung load: kill -USR1 shows where
            faulthandler.register(signal.SIGUSR1, all_threads=True)
            load(args[0].split(","), float(args[1]), float(args[2]), args[3], args[4],
                 int(args[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--short", action="store_true", help="the short set (scripts/test)")
    ap.add_argument("--seconds", type=float, default=None, help="load per scenario")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        print("\n".join(SCENARIOS))
        return 0
    names = a.scenarios or ((SHORT_SLOW if SLOW > 1 else SHORT) if a.short
                            else list(SCENARIOS))
    for n in names:
        if n not in SCENARIOS:
            ap.error("unknown scenario %s (--list)" % n)
    if os.geteuid() != 0:
        print("chaos: needs root (network namespaces, nftables)", file=sys.stderr)
        return 2
    for tool in ("ip", "nft"):
        if not shutil.which(tool):
            print("chaos: %s not found (iproute2, nftables)" % tool, file=sys.stderr)
            return 2
    # meson's timeout or a Ctrl-C: unwind, so that every finally removes
    # its namespaces and processes
    def stop(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    reap_stale()
    seconds = a.seconds or (6.0 if a.short else 8.0)
    rows, failed = [], 0
    hdr = "%-26s %8s %7s %6s %6s %6s %9s %9s %6s %6s  %s" % (
        "scenario", "requests", "allowed", "late", "never", "twice", "fallbacks",
        "(metrics)", "over", "bound", "result")
    print(hdr)
    print("-" * len(hdr), flush=True)
    for n in names:
        tmp = tempfile.mkdtemp(prefix="rlchaos-%s-" % n)
        t0 = time.monotonic()
        try:
            r = run_scenario(n, SCENARIOS[n], tmp, seconds)
        except Exception as e:  # noqa: BLE001 - reported as a failed row
            r = {"ok": False, "error": str(e)}
        r["seconds"] = round(time.monotonic() - t0, 1)
        r["scenario"] = n
        rows.append(r)
        if "error" in r:
            print("%-26s FAILED: %s (logs in %s)" % (n, r["error"], tmp), flush=True)
        else:
            print("%-26s %8d %7d %6d %6d %6d %9d %9d %6d %6d  %s" % (
                n, r["requests"], r["allowed"], r["late"], r["never"], r["twice"], r["fallbacks"],
                r["fallbacks_counted"], r["over"], r["bound"], "ok" if r["ok"] else "FAIL"),
                flush=True)
        if not r["ok"]:
            failed += 1
            log("chaos: %s failed (%s); its logs are in %s" % (n, json.dumps(r), tmp))
        elif os.environ.get("CHAOS_KEEP"):
            log("chaos: %s: logs kept in %s" % (n, tmp))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("%d scenarios, %d failed" % (len(rows), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
