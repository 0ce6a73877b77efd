"""test_vectors.py - the Lua script in a real Redis against tests/vectors.txt,
the same vectors the C limiter passes (tests/unit/test_limiter.c). Time is
injected through ARGV[1], which the daemon always sends as 0 (Redis TIME)."""

import os
import tempfile
import unittest

from harness import SRCDIR, RedisServer


# The script's name of each algorithm (src/redis_script.c's algo_arg), and
# whether its policy line gives a capacity before the rate.
ALGOS = {"sliding_window": ("s", False), "funnel": ("f", True)}


def read_vectors(path):
    scenarios = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("policy "):
                tok = line.split()[1:]
                letter, has_capacity = ALGOS[tok[0]]
                limits = []
                if has_capacity:
                    cap = int(tok[1])
                    count, period = tok[2].split("/")
                    limits.append((letter, cap, int(count), int(period)))
                else:
                    for t in tok[1:]:
                        count, period = t.split("/")
                        limits.append((letter, int(count), int(count), int(period)))
                scenarios.append((limits, []))
                continue
            left, right = line.split("->")
            now, op, cost = left.split()
            want = [int(x) for x in right.split()]
            scenarios[-1][1].append((lineno, int(now), op, int(cost), want))
    return scenarios


class LuaVectors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="rl-vectors-")
        self.redis = RedisServer(self.tmp).start()
        with open(os.path.join(SRCDIR, "src", "lua", "ratelimit.lua")) as f:
            self.script = f.read()

    def tearDown(self):
        self.redis.stop()

    def test_vectors(self):
        scenarios = read_vectors(os.path.join(SRCDIR, "tests", "vectors.txt"))
        self.assertGreater(len(scenarios), 5)
        checked = 0
        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)
            for n, (limits, steps) in enumerate(scenarios):
                keys = ["t:{v%d}:%d" % (n, i) for i in range(len(limits))]
                for lineno, now, op, cost, want in steps:
                    args = [str(now), "1", op, str(cost), str(len(limits))]
                    for algo, cap, count, period in limits:
                        args += [algo, str(cap), str(count), str(period)]
                    if op == "r":
                        args += ["t:reset", "v%d:u" % n]  # the notice's channel, tag
                    got = r.call("EVALSHA", sha, str(len(keys)), *keys, *args)
                    self.assertEqual(got, want, "vectors.txt:%d" % lineno)
                    checked += 1
        self.assertGreater(checked, 50)

    def test_batch_matches_single(self):
        """Several decisions in one call decide as they would one by one."""
        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)
            args = ["1000000000000", "3"]
            keys = []
            for i in range(3):
                keys.append("b:{u%d}:s1000" % i)
                args += ["a", str(i + 1), "1", "s", "2", "2", "1000"]
            got = r.call("EVALSHA", sha, str(len(keys)), *keys, *args)
            self.assertEqual(got, [1, 2, 1, 0, 1000, 1, 2, 0, 0, 1000, 0, 2, 2, -1, 0])


if __name__ == "__main__":
    unittest.main()
