#!/usr/bin/env python3
"""metrics_cost.py - what the metrics endpoint and its counters cost.

Starts a throwaway redis-server and a ratelimitd with metrics.listen on
free loopback ports, then measures one of:

  scrape     daemon CPU per GET /metrics (N scrapes on one keep-alive
             connection; CPU from /proc/PID/stat)
  halfopen   N connections to the metrics port that each send half a
             request: the daemon's descriptors and RSS with them open, that
             clients are still served, and when the daemon closes them
  callgrind  instructions the daemon executes per request on the deny-cache
             path: runs the daemon under valgrind --tool=callgrind twice,
             with N and 4N pipelined `ALLOW hot f` requests (a funnel far
             over its limit), and prints the difference per request; the
             daemon runs without metrics.listen, so --daemon may name a build
             from before the metrics for comparison; with --users K the
             requests go to K users in turn instead (u0, u1, ...: new users
             past the deny cache, through Redis, each a new heavy-hitter
             entry while K is large)

Not a test; docs/performance.md and docs/security.md quote its figures.

usage: bench/metrics_cost.py {scrape,halfopen,callgrind} [-n N] [--daemon PATH] [--users K]
"""

import argparse
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30.0):
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("nothing listens on port %d" % port)


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith(key + ":"):
                return int(ln.split()[1])
    return 0


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class Setup:
    def __init__(self, daemon, wrapper=(), metrics=True):
        self.dir = tempfile.mkdtemp(prefix="rl-metrics-")
        self.rport, self.port, self.mport = free_port(), free_port(), free_port()
        self.redis = subprocess.Popen(["redis-server", "--port", str(self.rport), "--save", "",
                                       "--appendonly", "no"], stdout=subprocess.DEVNULL)
        wait_port(self.rport)
        conf = os.path.join(self.dir, "rl.yaml")
        with open(conf, "w") as f:
            f.write("listen: [127.0.0.1:%d]\n"
                    "redis: {address: 127.0.0.1:%d, timeout: 5s}\n"
                    "%s"
                    "policies:\n"
                    "  f: {algorithm: funnel, capacity: 15, rate: 30/60s}\n"
                    "  open: 100000/1s\n"
                    % (self.port, self.rport,
                       "metrics: {listen: 127.0.0.1:%d}\n" % self.mport if metrics else ""))
        self.daemon = subprocess.Popen(list(wrapper) + [daemon, "-c", conf],
                                       stderr=open(os.path.join(self.dir, "rl.stderr"), "w"))
        try:
            wait_port(self.port, timeout=60)
        except SystemExit:
            self.stop()
            raise

    def stop(self):
        self.daemon.terminate()
        self.daemon.wait(60)
        if self.daemon.returncode not in (0, -15):
            with open(os.path.join(self.dir, "rl.stderr")) as f:
                sys.stderr.write(f.read())
        self.redis.terminate()
        self.redis.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def scrape(args):
    s = Setup(args.daemon)
    try:
        c = http.client.HTTPConnection("127.0.0.1", s.mport)
        cpu0, t0 = proc_cpu(s.daemon.pid), time.monotonic()
        for _ in range(args.n):
            c.request("GET", "/metrics")
            c.getresponse().read()
        cpu, wall = proc_cpu(s.daemon.pid) - cpu0, time.monotonic() - t0
        print("%d scrapes: daemon CPU %.2f s (%.0f us per scrape), %.2f ms wall per scrape"
              % (args.n, cpu, cpu / args.n * 1e6, wall / args.n * 1e3))
    finally:
        s.stop()


def halfopen(args):
    s = Setup(args.daemon)
    try:
        pid = s.daemon.pid
        fd0, rss0 = fd_count(pid), proc_status(pid, "VmRSS")
        socks = []
        for _ in range(args.n):
            k = socket.create_connection(("127.0.0.1", s.mport))
            k.sendall(b"GET /metrics HTTP/1.1\r\nX-a: " + b"b" * 100)
            socks.append(k)
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
            c.sendall(b"ALLOW z open\n")
            reply = c.recv(100).decode().strip()
        fd1, rss1 = fd_count(pid), proc_status(pid, "VmRSS")
        t = time.monotonic()
        while fd_count(pid) > fd0 + 2 and time.monotonic() - t < 60:
            time.sleep(0.1)
        print("%d half-sent requests: fds %d -> %d, RSS %d -> %d KiB; a client meanwhile got "
              "%r; the daemon closed them %.1f s later (fds %d)"
              % (args.n, fd0, fd1, rss0, rss1, reply, time.monotonic() - t, fd_count(pid)))
        for k in socks:
            k.close()
    finally:
        s.stop()


def callgrind_total(daemon, n, out, users=1):
    # without metrics.listen, so that a daemon from before the metrics can be measured too
    s = Setup(daemon, wrapper=("valgrind", "--tool=callgrind", "--callgrind-out-file=" + out),
              metrics=False)
    try:
        c = socket.create_connection(("127.0.0.1", s.port))
        batch = b"ALLOW hot f\n" * 500
        for k in range(n // 500):
            if users > 1:
                batch = b"".join(b"ALLOW u%d f\n" % ((k * 500 + i) % users) for i in range(500))
            c.sendall(batch)
            want = 500
            while want:
                want -= c.recv(65536).count(b"\n")
        c.close()
    finally:
        s.stop()
    ann = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True).stdout
    m = re.search(r"^([\d,]+) .*PROGRAM TOTALS", ann, re.M)
    return int(m.group(1).replace(",", ""))


def callgrind(args):
    d = tempfile.mkdtemp(prefix="rl-cg-")
    try:
        a = callgrind_total(args.daemon, args.n, os.path.join(d, "a"), args.users)
        b = callgrind_total(args.daemon, 4 * args.n, os.path.join(d, "b"), args.users)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("%d requests: %d instructions, %d requests: %d; %.0f instructions per request"
          % (args.n, a, 4 * args.n, b, (b - a) / (3 * args.n)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["scrape", "halfopen", "callgrind"])
    ap.add_argument("-n", type=int, default=None)
    ap.add_argument("--daemon", default=os.path.join(ROOT, "build", "ratelimitd"))
    ap.add_argument("--users", type=int, default=1, help="callgrind: users in turn")
    args = ap.parse_args()
    if args.n is None:
        args.n = {"scrape": 2000, "halfopen": 1000, "callgrind": 10000}[args.what]
    {"scrape": scrape, "halfopen": halfopen, "callgrind": callgrind}[args.what](args)


if __name__ == "__main__":
    main()
