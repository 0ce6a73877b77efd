#!/usr/bin/env python3
"""script_cost.py - what the decision script costs Redis, measured alone.

Starts a throwaway redis-server on a free loopback port, loads the
decision script as the build made it ($BENCH_BUILDDIR/ratelimit.lua, default
build/: src/store/lua/ratelimit.lua with its argument layout filled in from
src/store/script_layout.txt, whose constants this also reads) and sends EVALSHA calls that each decide BATCH
decisions (the daemon's batch format, random users out of 100k), keeping
DEPTH calls in flight. Prints Redis's CPU time per decision (from
/proc/PID/stat) and the time INFO commandstats reports inside EVALSHA.

Not a test; docs/performance.md quotes its figures. With --depth 1 Redis
sleeps between calls, so the difference to --depth 4 is what waking it
costs.

With --floor, the same run also measures a floor script of the same
shape (the same keys and arguments, five integers back per decision) that
only does a GET and a SET with an expiry per key: what any script doing a
decision's least costs Redis. Rounds alternate between the two (--rounds).

Decisions are sent as the daemon sends them (src/store/redis_script.c):
the first of a call in full, the rest, of the same policy, as "=1";
--long sends each in full (the floor gets the same arguments either way).
With --pairs N each decision is one over N pairs (MALLOW, Envoy's N
descriptors), each pair one limit of the policy on a user of its own: the
first in full, the rest as "~1"; figures are then per decision over pairs
(the floor's: a GET and a SET per pair's key, 7 + 3N integers back).

usage: bench/script_cost.py [--algo funnel|sliding|fixed|counter] [--batch N] [--calls N]
                            [--depth N] [--script PATH] [--floor] [--rounds N] [--long]
                            [--instructions] [--pairs N]
"""

import argparse
import glob
import importlib.util
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILDDIR = os.path.join(HERE, "..", os.environ.get("BENCH_BUILDDIR", "build"))
_spec = importlib.util.spec_from_file_location("script_layout",
                                               os.path.join(BUILDDIR, "script_layout.py"))
L = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(L)

POLICY = {  # the throughput policies of scripts/bench, as the daemon sends them
    "funnel": ("f", [L.ALGO_FUNNEL, "1000000000", "1000000000", "1000"]),
    "sliding": ("s60000", [L.ALGO_SLIDING, "1000", "1000", "60000"]),
    "fixed": ("w60000", [L.ALGO_FIXED, "1000000000", "1000000000", "60000"]),
    "counter": ("c60000", [L.ALGO_COUNTER, "1000000000", "1000000000", "60000"]),
}


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    line = f.readline()
    if not line:
        raise EOFError("redis closed the connection")
    kind, rest = line[:1], line[1:].rstrip(b"\r\n")
    if kind == b"-":
        raise RuntimeError(rest.decode(errors="replace"))
    if kind in b"+:":
        return rest
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        return [read_reply(f) for _ in range(int(rest))]
    raise RuntimeError("unexpected reply %r" % line)


# The floor: a GET and a SET with expiry per decision's key, nothing else.
FLOOR = """
local n = tonumber(ARGV[2])
local out = {}
for i = 1, n do
  redis.call('GET', KEYS[i])
  redis.call('SET', KEYS[i], '1:1', 'PX', 60000)
  local j = 5 * i
  out[j - 4] = 1; out[j - 3] = 1; out[j - 2] = 1; out[j - 1] = 0; out[j] = 1
end
return out
"""

# The floor of decisions over pairs (the same keys and arguments as the
# script gets; #KEYS / n pairs a decision): a GET and a SET per pair's key,
# 7 + 3 * pairs integers back per decision.
FLOOR_PAIRS = """
local n = tonumber(ARGV[2])
local m = #KEYS / n
local out, k = {}, 1
for _ = 1, n do
  for _ = 1, m do
    redis.call('GET', KEYS[k])
    redis.call('SET', KEYS[k], '1:1', 'PX', 60000)
    k = k + 1
  end
  local j = #out
  out[j + 1] = 1; out[j + 2] = 1; out[j + 3] = 1; out[j + 4] = 0; out[j + 5] = 1
  out[j + 6] = 1; out[j + 7] = 0
  for g = 1, m do out[j + 5 + 3 * g] = 1; out[j + 6 + 3 * g] = 1; out[j + 7 + 3 * g] = 1 end
end
return out
"""


def cpu_seconds(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", choices=sorted(POLICY), default="funnel")
    ap.add_argument("--batch", type=int, default=64, help="decisions per call (default 64)")
    ap.add_argument("--calls", type=int, default=3000, help="measured calls (default 3000)")
    ap.add_argument("--depth", type=int, default=4, help="calls in flight (default 4)")
    ap.add_argument("--script", default=os.path.join(BUILDDIR, "ratelimit.lua"))
    ap.add_argument("--floor", action="store_true", help="also measure the floor script")
    ap.add_argument("--rounds", type=int, default=1, help="rounds (alternating with --floor)")
    ap.add_argument("--long", action="store_true",
                    help="every decision's arguments in full, as before the short form")
    ap.add_argument("--pairs", type=int, default=0,
                    help="decisions over this many pairs each (MALLOW; default 0: ALLOWs)")
    ap.add_argument("--instructions", action="store_true",
                    help="count Redis's instructions per decision under callgrind instead "
                         "(the same from run to run; --calls defaults to 200)")
    o = ap.parse_args()
    if o.instructions and "--calls" not in sys.argv:
        o.calls = 200
    cgdir = tempfile.mkdtemp(prefix="script-cost-") if o.instructions else None

    with open(o.script) as f:
        script = f.read()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
              "--save", "", "--appendonly", "no", "--logfile", "/dev/null"]
    if o.instructions:
        server = ["valgrind", "-q", "--tool=callgrind", "--instr-atstart=no",
                  "--callgrind-out-file=%s/cg.out" % cgdir] + server
    redis = subprocess.Popen(server)
    results = {}
    try:
        deadline = time.monotonic() + (60 if o.instructions else 10)
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("script_cost: redis-server did not start")
                time.sleep(0.05)
        f = conn.makefile("rb")

        def call(*args):
            conn.sendall(resp(args))
            return read_reply(f)

        suffix, limit = POLICY[o.algo]

        def commands(sha):
            rng = random.Random(1)
            cmds = []
            for _ in range(200):
                keys, argv = [], ["0", str(o.batch)]
                if o.pairs:
                    full = [L.OP_ALL_ALLOW, "1", str(o.pairs)] + (["0", "1"] + limit) * o.pairs
                    for i in range(o.batch):
                        for g in range(o.pairs):
                            keys.append("rl:{thr%d:u%d}:%s" % (g, rng.randrange(100000), suffix))
                        argv += [L.SHORT_ALL_REPEAT + "1"] if i > 0 and not o.long else full
                    cmds.append(resp([b"EVALSHA", sha, str(len(keys))] + keys + argv))
                    continue
                for i in range(o.batch):
                    keys.append("rl:{thr:u%d}:%s" % (rng.randrange(100000), suffix))
                    # as the daemon sends them: an ALLOW of the limit of the
                    # ALLOW before it is "=<cost>" (--long: all in full)
                    argv += ([L.SHORT_REPEAT + "1"] if i > 0 and not o.long
                             else [L.OP_ALLOW, "1", "1"] + limit)
                cmds.append(resp([b"EVALSHA", sha, str(len(keys))] + keys + argv))
            return cmds

        def measure(name, cmds):
            call("FLUSHALL")
            for c in cmds:  # warm-up, and a check that every decision came back
                conn.sendall(c)
                r = read_reply(f)
                width = (L.PAIRS_REPLY_WIDTH + L.GROUP_REPLY_WIDTH * o.pairs if o.pairs
                         else L.REPLY_WIDTH)
                if not isinstance(r, list) or len(r) != width * o.batch:
                    sys.exit("script_cost: unexpected reply %r" % (r,))
            call("CONFIG", "RESETSTAT")
            if o.instructions:
                for x in glob.glob(cgdir + "/cg.out*"):
                    os.unlink(x)
                callgrind("-i", "on")
                callgrind("-z")
            cpu0, t0 = cpu_seconds(redis.pid), time.monotonic()
            sent = got = 0
            while got < o.calls:
                while sent < o.calls and sent - got < o.depth:
                    conn.sendall(cmds[sent % len(cmds)])
                    sent += 1
                read_reply(f)
                got += 1
            cpu1, t1 = cpu_seconds(redis.pid), time.monotonic()
            n = o.calls * o.batch
            if o.instructions:
                callgrind("-d")
                callgrind("-i", "off")
                total = 0
                for x in glob.glob(cgdir + "/cg.out*"):
                    with open(x, errors="replace") as dump:
                        for ln in dump:
                            if ln.startswith("summary:") or ln.startswith("totals:"):
                                total = max(total, int(ln.split()[1]))
                print("%s%s, %d decisions per call: %.0f instructions/decision in Redis"
                      % (name, o.algo, o.batch, total / n))
                results.setdefault(name, []).append(total / n)
                return
            stats = call("INFO", "commandstats").decode()
            line = next(ln for ln in stats.splitlines() if ln.startswith("cmdstat_evalsha:"))
            usec_per_call = float(line.split("usec_per_call=")[1].split(",")[0])
            results.setdefault(name, []).append((cpu1 - cpu0) * 1e6 / n)
            print("%s%s, %d decisions per call, %d in flight: Redis CPU %.2f us/decision, "
                  "inside EVALSHA %.2f us/decision, %.0f decisions/s"
                  % (name, o.algo, o.batch, o.depth, (cpu1 - cpu0) * 1e6 / n,
                     usec_per_call / o.batch, n / (t1 - t0)))

        def callgrind(*args):
            subprocess.run(["callgrind_control"] + list(args) + [str(redis.pid)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

        mine = commands(call("SCRIPT", "LOAD", script))
        floor = commands(call("SCRIPT", "LOAD", FLOOR_PAIRS if o.pairs else FLOOR)) if o.floor else None
        for _ in range(o.rounds):
            measure("", mine)
            if floor:
                measure("floor ", floor)
        if o.rounds > 1:
            for name, v in results.items():
                v = sorted(v)
                print("%s%s: median %.2f, range %.2f-%.2f %s over %d rounds"
                      % (name, o.algo, v[len(v) // 2], v[0], v[-1],
                         "instructions" if o.instructions else "us", len(v)))
    finally:
        redis.terminate()
        redis.wait()
        if cgdir:
            shutil.rmtree(cgdir, ignore_errors=True)


if __name__ == "__main__":
    main()
