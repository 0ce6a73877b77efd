"""fixed_window and sliding_window_counter through the daemon and a real
Redis: windows aligned to Redis's clock, retry_after to the window's end,
big counts in one small key, the previous window's weight; and three
daemons on one Redis allowing exactly the limit, for every algorithm."""

import time
import unittest

from harness import DaemonTest, parse_decision, wait_until
from test_concurrency import hammer

POLICIES = {
    "fw": "{algorithm: fixed_window, limits: [3/1s, 5/1h]}",
    "big": "{algorithm: sliding_window_counter, limits: 1000000/1h}",
    "bigfw": "{algorithm: fixed_window, limits: 1000000/1h}",
    "swc": "{algorithm: sliding_window_counter, limits: 5/1s}",
}


class WindowsTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.fresh(POLICIES)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def redis_ms(self):
        s, us = self.redis.call("TIME")
        return int(s) * 1000 + int(us) // 1000

    def early_in_second(self, lo=20, hi=300):
        """Waits until Redis's clock is lo..hi ms into a second (windows of
        1 s are aligned to it); returns the ms into it."""
        for _ in range(3):
            ms = self.redis_ms() % 1000
            if lo <= ms <= hi:
                return ms
            time.sleep(((1000 - ms + lo + 10) % 1000) / 1000.0)
        return self.redis_ms() % 1000

    def allow(self, user, action, cost=None):
        line = "ALLOW %s %s" % (user, action) + ("" if cost is None else " %d" % cost)
        return parse_decision(self.c.request(line))

    def test_fixed_window_counts_to_the_window_end(self):
        self.early_in_second()
        r = self.c.pipeline(["ALLOW u fw"] * 4)
        t_ms = self.redis_ms()
        for i in range(3):
            self.assertDecision(r[i], "ALLOWED", 3, 2 - i, 0, (1, 1000))
        v = self.assertDecision(r[3], "DENIED", 3, 0, (1, 1000), (1, 1000))
        # retry_after is the end of the second in Redis's clock, and so is reset
        self.assertEqual(v[3], v[4])
        self.assertLess((t_ms + v[3]) % 1000, 500,
                        "retry_after does not end at a whole second: %r" % (v,))
        # one key per limit, "<window>:<count>", expiring with its window
        w = int(self.redis.call("GET", "rl:{fw:u}:w1000").split(b":")[0])
        self.assertEqual(self.redis.call("GET", "rl:{fw:u}:w1000"), b"%d:3" % w)
        self.assertEqual(self.redis.call("GET", "rl:{fw:u}:w3600000").split(b":")[1], b"3")
        self.assertTrue(0 < self.redis.call("PTTL", "rl:{fw:u}:w1000") <= 1000)
        # the denial charged nothing; the next second starts empty
        time.sleep(v[3] / 1000.0 + 0.01)
        self.assertDecision(self.c.request("ALLOW u fw"), "ALLOWED", 5, 1, 0)
        self.assertDecision(self.c.request("ALLOW u fw"), "ALLOWED", 5, 0, 0)
        # now the hour binds: retry_after runs to the end of the hour
        v = self.assertDecision(self.c.request("ALLOW u fw"), "DENIED", 5, 0)
        self.assertEqual((self.redis_ms() + v[3] + 500) // 1000 % 3600, 0, v)
        self.assertEqual(self.redis.call("GET", "rl:{fw:u}:w1000").split(b":")[1], b"2")

    def test_big_limits_in_one_small_key(self):
        for action in ("big", "bigfw"):
            self.assertDecision(self.c.request("ALLOW u %s 999999" % action),
                                "ALLOWED", 1000000, 1, 0)
            self.assertDecision(self.c.request("ALLOW u %s 2" % action), "DENIED", 1000000, 1)
            self.assertDecision(self.c.request("ALLOW u %s 1" % action), "ALLOWED", 1000000, 0)
            self.assertDecision(self.c.request("ALLOW u %s 1000001" % action), "DENIED",
                                1000000, 0, -1)
        for key in (b"rl:{big:u}:c3600000", b"rl:{bigfw:u}:w3600000"):
            self.assertLess(self.redis.call("MEMORY", "USAGE", key), 128, key)
        self.assertEqual(sorted(self.redis.keys("rl:*")),
                         [b"rl:{big:u}:c3600000", b"rl:{bigfw:u}:w3600000"])

    def test_counter_weighs_the_previous_window(self):
        self.early_in_second(lo=20, hi=200)
        r = [parse_decision(x) for x in self.c.pipeline(["ALLOW w swc"] * 6)]
        self.assertEqual([x[0] for x in r], ["ALLOWED"] * 5 + ["DENIED"])
        # the previous window weighs in until 800 ms into the next one: retry
        # is 1 ms into it (5 * 999/1000 floors to 4), reset 801 ms into it
        self.assertTrue(1 <= r[5][3] <= 1000, r[5])
        self.assertEqual(r[5][4] - r[5][3], 800, r[5])
        # 300 ms into the next second the 5 of the last one count for
        # floor(5 * 0.7) = 3; they weigh something until 800 ms into it, so
        # fewer than 5 pass, and at least one
        ms = self.redis_ms() % 1000
        time.sleep((1300 - ms) / 1000.0)
        got = [parse_decision(x)[0] for x in self.c.pipeline(["ALLOW w swc"] * 5)]
        left = got.count("ALLOWED")
        self.assertTrue(1 <= left <= 4, "the previous second does not weigh: %r" % got)
        self.assertEqual(got, ["ALLOWED"] * left + ["DENIED"] * (5 - left))
        # "<window>:<count>:<previous count>"
        parts = self.redis.call("GET", "rl:{swc:w}:c1000").split(b":")
        self.assertEqual(parts[1:], [b"%d" % left, b"5"])


class ThreeDaemonsTest(DaemonTest):
    """Three daemons on one Redis, 60 connections released together: every
    algorithm allows exactly its limit, each allowed request sees its own
    remaining, and a RESET through one daemon reaches the others."""

    POLICIES = {
        "sw": "40/1d",
        "fw": "{algorithm: fixed_window, limits: 40/1d}",
        "swc": "{algorithm: sliding_window_counter, limits: 40/1d}",
        "fu": "{algorithm: funnel, capacity: 40, rate: 1/1d}",
    }

    def test_every_algorithm_exact_across_three_daemons(self):
        self.redis = self.start_redis()
        ds = [self.start_daemon(self.POLICIES, name="rl%d" % i) for i in range(3)]
        ports = [d.port for d in ds]
        for action in sorted(self.POLICIES):
            res = hammer(ports, "all", action, 60, 2)
            allowed = [v for v in res if v[0] == "ALLOWED"]
            self.assertEqual(len(allowed), 40, action)
            self.assertEqual(sorted(v[2] for v in allowed), list(range(40)), action)
            with ds[0].client() as c0:
                self.assertEqual(c0.request("RESET all %s" % action), "OK")
            for d in ds[1:]:
                with d.client() as c:
                    wait_until(lambda: c.request("PEEK all %s" % action)
                               .startswith("ALLOWED 40 40 "), 2.0,
                               what="%s: daemon %s to see the RESET" % (action, d.name))


if __name__ == "__main__":
    unittest.main()
