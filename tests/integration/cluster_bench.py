#!/usr/bin/env python3
"""cluster_bench.py - decisions/s of ratelimitd against one Redis, a 1-master
Redis Cluster and a 3-master Redis Cluster on this machine (issue 5, for
docs/deployment.md). Not a test: a measurement.

Each shape is started fresh on free loopback ports in a temp dir (topology.py),
with D daemons (default 1) configured for it; one build/bench/ratelimit-bench
process per daemon drives it (--target daemon, C connections x P in flight,
uniform keys); the figures of the bench processes, which run at the same
time, are added up. CPU time of every redis-server and daemon is read from
/proc over the measured window.

Usage: python3 tests/integration/cluster_bench.py [options]
  --shapes single,cluster1,cluster3   what to measure (default: all three)
  --daemons N         daemons (and bench processes) per shape (default 1)
  --seconds S         measured seconds (default 5), --warmup S (default 1)
  --connections C     per bench process (default 50), --pipeline P (default 16)
  --policy funnel|sliding   (default funnel: allows everything)
  --keys SPEC         ratelimit-bench --keys (default uniform:100000)
  --csv FILE          also write one CSV line per shape
Environment: RATELIMITD, RL_SRCDIR as for the tests; RL_BENCH for the tool.
Everything started is stopped on exit.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402
from harness import Daemon, RedisServer, free_port, make_config, proc_cpu_seconds  # noqa: E402
from topology import RedisCluster, cluster_redis_opts  # noqa: E402

BENCH = os.environ.get("RL_BENCH") or os.path.join(harness.SRCDIR, "build", "bench",
                                                   "ratelimit-bench")


POLICIES = {
    "funnel": "{algorithm: funnel, capacity: 1000000000, rate: 1000000000/1s}",
    "sliding": "1000/1m",
}


def start_shape(shape, tmpdir):
    """Returns (redis_opts, [redis-server processes], stopper)."""
    if shape == "single":
        r = RedisServer(tmpdir).start()
        return {"address": r.address, "timeout": "1s"}, [r.proc], r.stop
    n = int(shape[len("cluster"):])
    c = RedisCluster(tmpdir, masters=n).start()
    return cluster_redis_opts(c, timeout="1s"), [x.proc for x in c.nodes], c.stop


def bench_shape(shape, daemons=1, seconds=5.0, warmup=1.0, connections=50, pipeline=16,
                policy="funnel", keys="uniform:100000", log=print):
    """Measures one shape; returns a dict of figures."""
    tmpdir = tempfile.mkdtemp(prefix="rl-cbench-")
    stoppers = []
    try:
        ropts, rprocs, stop = start_shape(shape, tmpdir)
        stoppers.append(stop)
        ds = []
        for i in range(daemons):
            port = free_port()
            cfg = make_config(["127.0.0.1:%d" % port], ropts, {"b": POLICIES[policy]},
                              admin=False, on_store_error="error", log_level="warn")
            d = Daemon(tmpdir, cfg, name="rl%d" % i, port=port).start()
            stoppers.append(d.stop)
            ds.append(d)
        procs = []
        argv_common = ["--target", "daemon", "--action", "b", "-c", str(connections),
                       "-P", str(pipeline), "-d", str(seconds), "--warmup", str(warmup),
                       "--keys", keys, "--csv"]
        # CPU of servers and daemons over the measured window (after warm-up)
        for i, d in enumerate(ds):
            argv = [BENCH, "--daemon", "127.0.0.1:%d" % d.port, "--seed", str(i + 1),
                    "--daemon-pid", str(d.proc.pid)] + argv_common
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        time.sleep(warmup)
        t0 = time.monotonic()
        r0 = [proc_cpu_seconds(p.pid) for p in rprocs]
        d0 = [proc_cpu_seconds(d.proc.pid) for d in ds]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=seconds + warmup + 120)
            if p.returncode != 0:
                raise RuntimeError("ratelimit-bench failed (%d): %s" % (p.returncode, err))
            outs.append(out.strip().splitlines()[-1])
        wall = time.monotonic() - t0
        r1 = [proc_cpu_seconds(p.pid) for p in rprocs]
        d1 = [proc_cpu_seconds(d.proc.pid) for d in ds]
        hdr = subprocess.run([BENCH, "--csv-header"], capture_output=True, text=True,
                             check=True).stdout.strip().split(",")
        rows = [dict(zip(hdr, o.split(","))) for o in outs]
        dps = sum(float(r["daemon_dps"]) for r in rows)
        err = sum(int(r["daemon_err"] or 0) for r in rows)
        decided = sum(int(r["daemon_allowed"] or 0) + int(r["daemon_denied"] or 0) for r in rows)
        rcpu = [b - a for a, b in zip(r0, r1)]
        dcpu = sum(b - a for a, b in zip(d0, d1))
        res = {
            "shape": shape, "daemons": daemons, "connections": connections,
            "pipeline": pipeline, "policy": policy, "keys": keys, "seconds": seconds,
            "dps": round(dps), "err": err,
            "p50_us": max(float(r["daemon_p50_us"]) for r in rows),
            "p99_us": max(float(r["daemon_p99_us"]) for r in rows),
            # CPU per decision over the window (the window measured here is
            # the bench's window plus process exit: a slight overestimate)
            "redis_cpu_us": round(sum(rcpu) / max(decided, 1) * 1e6, 2),
            "daemon_cpu_us": round(dcpu / max(decided, 1) * 1e6, 2),
            "redis_busy": [round(c / wall, 2) for c in rcpu],
            "daemon_busy": round(dcpu / wall, 2),
        }
        log("%-9s daemons=%d dps=%8d err=%d p50=%7.0fus p99=%7.0fus redis_cpu=%.2fus/dec "
            "daemon_cpu=%.2fus/dec redis_busy=%s daemon_busy=%.2f"
            % (shape, daemons, res["dps"], err, res["p50_us"], res["p99_us"],
               res["redis_cpu_us"], res["daemon_cpu_us"], res["redis_busy"],
               res["daemon_busy"]))
        return res
    finally:
        for s in reversed(stoppers):
            try:
                s()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(tmpdir, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="single,cluster1,cluster3")
    ap.add_argument("--daemons", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--policy", choices=sorted(POLICIES), default="funnel")
    ap.add_argument("--keys", default="uniform:100000")
    ap.add_argument("--csv")
    a = ap.parse_args(argv)
    for f in (BENCH, harness.DAEMON):
        if not os.access(f, os.X_OK):
            sys.exit("missing %s (ninja -C build)" % f)
    print("load average before: %s" % open("/proc/loadavg").read().strip(), flush=True)
    results = []
    for shape in a.shapes.split(","):
        results.append(bench_shape(shape.strip(), daemons=a.daemons, seconds=a.seconds,
                                   warmup=a.warmup, connections=a.connections,
                                   pipeline=a.pipeline, policy=a.policy, keys=a.keys,
                                   log=lambda s: print(s, flush=True)))
    print("load average after: %s" % open("/proc/loadavg").read().strip())
    if a.csv:
        cols = list(results[0].keys())
        with open(a.csv, "w") as f:
            f.write(",".join(cols) + "\n")
            for r in results:
                f.write(",".join(str(r[c]).replace(",", ";") for c in cols) + "\n")
    return results


if __name__ == "__main__":
    main()
