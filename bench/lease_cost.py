#!/usr/bin/env python3
"""lease_cost.py - what concurrency leases and a funnel's delay cost.

Starts a throwaway redis-server and a ratelimitd on free loopback ports,
then measures one of:

  leases   ACQUIRE+RELEASE pairs per second: C connections, each taking a
           lease (P users in turn, pipelined) and giving it back, for S
           seconds; the daemon's and Redis's CPU per operation (from
           /proc/PID/stat). The client is Python (asyncio): the pairs/s are
           its ceiling as much as the daemon's; the CPU per operation is
           the daemon's and Redis's own.
  delay    N requests held by a funnel's delay at once, one connection
           each: the daemon's CPU and RSS while they wait (a timer each:
           they should cost nothing but the answers whose slots come
           meanwhile).

Not a test; scripts/bench runs it (scenarios leases, delay) and
docs/performance.md quotes its figures.

usage: bench/lease_cost.py {leases,delay} [-c C] [-P P] [-s S] [-n N]
       [--daemon PATH]
"""

import argparse
import asyncio
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from metrics_cost import free_port, proc_cpu, wait_port  # noqa: E402 - after the path


def proc_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


def metric(port, name):
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        for ln in r:
            if ln.startswith(name.encode() + b" "):
                return float(ln.split()[1])
    return None


class Setup:
    def __init__(self, daemon, policies, top=""):
        self.tmp = tempfile.mkdtemp(prefix="rl-lease-cost-")
        self.rport, self.port, self.mport = free_port(), free_port(), free_port()
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.rport), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, cwd=self.tmp)
        wait_port(self.rport)
        conf = os.path.join(self.tmp, "rl.yaml")
        with open(conf, "w") as f:
            f.write("listen: [127.0.0.1:%d]\nredis: {address: 127.0.0.1:%d}\nlog_level: warn\n"
                    "metrics: {listen: 127.0.0.1:%d}\n%s"
                    "policies:\n%s" % (self.port, self.rport, self.mport, top,
                                       "".join("  %s: %s\n" % kv for kv in policies.items())))
        self.daemon = subprocess.Popen([daemon, "-c", conf], cwd=self.tmp)
        wait_port(self.port)

    def close(self):
        for p in (self.daemon, self.redis):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


async def lease_worker(port, users, seconds, counts):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        w.write(b"".join(b"ACQUIRE %s export\n" % u for u in users))
        ids = []
        for _ in users:
            line = await r.readline()
            if line.startswith(b"ALLOWED"):
                ids.append(line.split()[-1])
            else:
                counts["denied"] += 1
        w.write(b"".join(b"RELEASE %s\n" % i for i in ids))
        for _ in ids:
            line = await r.readline()
            if line != b"OK\n":
                counts["errors"] += 1
        counts["pairs"] += len(ids)
    w.close()


def leases(args):
    s = Setup(args.daemon, {"export": "{algorithm: concurrency, limit: 1000, lease: 30s}"})
    try:
        counts = {"pairs": 0, "denied": 0, "errors": 0}

        async def run():
            await asyncio.gather(*[
                lease_worker(s.port, [b"u%d-%d" % (c, k) for k in range(args.P)], args.s, counts)
                for c in range(args.c)])
        d0, r0, t0 = proc_cpu(s.daemon.pid), proc_cpu(s.redis.pid), time.monotonic()
        asyncio.run(run())
        d1, r1, t1 = proc_cpu(s.daemon.pid), proc_cpu(s.redis.pid), time.monotonic()
        ops = 2 * counts["pairs"]
        print("leases: %d connections x %d pipelined, %.1f s: %d ACQUIRE+RELEASE pairs, "
              "%.0f pairs/s; per operation: daemon CPU %.1f us, Redis CPU %.1f us "
              "(%d denied, %d errors)"
              % (args.c, args.P, t1 - t0, counts["pairs"], counts["pairs"] / (t1 - t0),
                 1e6 * (d1 - d0) / max(ops, 1), 1e6 * (r1 - r0) / max(ops, 1),
                 counts["denied"], counts["errors"]))
        return 1 if counts["errors"] else 0
    finally:
        s.close()


def delay(args):
    n = args.n
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1000), hard))
    # n requests of one user: a slot every 1/rate s, all within the 60 s
    # delay; the slowest such rate, so that few are answered meanwhile
    rate = max(1, n // 58 + 1)
    s = Setup(args.daemon, {
        "slow": "{algorithm: funnel, capacity: 1, rate: %d/1s, delay: {max: 60s}}" % rate,
        },
        top="max_delayed: %d\nmax_clients: %d\n" % (n + 10, n + 100))
    try:
        rss0 = proc_rss_kib(s.daemon.pid)
        socks = []
        for i in range(n):
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"ALLOW one slow\n")
            socks.append(c)
        t = time.monotonic()
        while metric(s.mport, "ratelimitd_delayed_total") < n - 1:
            if time.monotonic() - t > 60:
                sys.exit("delay: the requests were never all taken")
            time.sleep(0.1)
        rss1 = proc_rss_kib(s.daemon.pid)
        w0 = metric(s.mport, "ratelimitd_delayed_waiting")
        c0, t0 = proc_cpu(s.daemon.pid), time.monotonic()
        time.sleep(args.s)
        c1, t1 = proc_cpu(s.daemon.pid), time.monotonic()
        w1 = metric(s.mport, "ratelimitd_delayed_waiting")
        print("delay: %d requests waiting, a connection each (%d to %d over the %.1f s measured, "
              "%d answered as their slots came at %d/s): daemon CPU %.1f ms (%.2f%% of a core); "
              "RSS +%.1f MiB with them (%.0f bytes per waiting request and its connection)"
              % (n, w0, w1, t1 - t0, w0 - w1, rate, 1000 * (c1 - c0), 100 * (c1 - c0) / (t1 - t0),
                 (rss1 - rss0) / 1024, 1024 * (rss1 - rss0) / n))
        for c in socks:
            c.close()
        return 0
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["leases", "delay"])
    ap.add_argument("-c", type=int, default=20, help="connections (leases)")
    ap.add_argument("-P", type=int, default=16, help="leases in flight per connection")
    ap.add_argument("-s", type=float, default=5.0, help="seconds measured")
    ap.add_argument("-n", type=int, default=10000, help="requests waiting (delay)")
    ap.add_argument("--daemon", default=os.path.join(
        ROOT, os.environ.get("BENCH_BUILDDIR") or "build", "ratelimitd"))
    args = ap.parse_args()
    sys.exit(leases(args) if args.what == "leases" else delay(args))


if __name__ == "__main__":
    main()
