"""Several limits on one action: all-or-nothing, binding-limit reporting."""

import time
import unittest

from harness import DaemonTest, parse_decision


def key(user, action, window_ms):
    return "rl:{%s:%s}:s%d" % (action, user, window_ms)


class MultiTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.fresh({
            "login": "[3/1s, 5/10s]",
            "tie": "[3/1s, 3/10s]",
            "seed": "[3/100ms, 20/1s]",
            "rev": "[5/10s, 3/1s]",
        })
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def zcard(self, user, action, window_ms):
        return self.redis.call("ZCARD", key(user, action, window_ms))

    def test_denial_by_short_limit_charges_nothing(self):
        r = self.c.pipeline(["ALLOW a login"] * 3)
        for i, x in enumerate(r):
            # smallest remaining: the 1s limit (2,1,0 vs 4,3,2)
            self.assertDecision(x, "ALLOWED", 3, 2 - i, 0, (900, 1000))
        for _ in range(4):
            self.assertDecision(self.c.request("ALLOW a login"), "DENIED", 3, 0, (1, 1000),
                                (1, 1000))
        self.assertEqual(self.zcard("a", "login", 10000), 3, "denial charged the 10s limit")
        self.assertEqual(self.zcard("a", "login", 1000), 3)
        self.assertDecision(self.c.request("PEEK a login"), "DENIED", 3, 0)

    def test_denial_by_long_limit_charges_nothing(self):
        t0 = time.monotonic()
        self.c.pipeline(["ALLOW b login"] * 3)
        time.sleep(1.05)
        # the 1s window is empty again; the 10s limit has 2 left and binds
        self.assertDecision(self.c.request("ALLOW b login"), "ALLOWED", 5, 1, 0, (9900, 10000))
        self.assertDecision(self.c.request("ALLOW b login"), "ALLOWED", 5, 0, 0, (9900, 10000))
        e = (time.monotonic() - t0) * 1000
        for _ in range(3):
            v = self.assertDecision(self.c.request("ALLOW b login"), "DENIED", 5, 0)
            self.assertTrue(10000 - e - 200 <= v[3] <= 10000 - 1050 + 30, (v, e))
        # the 1s limit was not charged by those denials
        self.assertEqual(self.zcard("b", "login", 1000), 2)
        self.assertEqual(self.zcard("b", "login", 10000), 5)

    def test_denied_by_both_reports_largest_retry(self):
        self.c.pipeline(["ALLOW c tie"] * 3)
        v = self.assertDecision(self.c.request("ALLOW c tie"), "DENIED", 3, 0)
        self.assertTrue(9000 <= v[3] <= 10000, "binding must be the 10s limit: %r" % (v,))
        self.assertTrue(9000 <= v[4] <= 10000, v)

    def test_allowed_tie_reports_first_limit(self):
        self.assertDecision(self.c.request("ALLOW d tie"), "ALLOWED", 3, 2, 0, (900, 1000))

    def test_order_of_limits_does_not_change_decisions(self):
        r = self.c.pipeline(["ALLOW e rev"] * 4)
        self.assertDecision(r[0], "ALLOWED", 3, 2, 0, (900, 1000))
        self.assertDecision(r[2], "ALLOWED", 3, 0, 0, (900, 1000))
        self.assertDecision(r[3], "DENIED", 3, 0, (1, 1000))
        self.assertEqual(self.zcard("e", "rev", 10000), 3)

    def test_cost_above_one_capacity(self):
        self.assertEqual(self.c.request("ALLOW f login 4"), "DENIED 3 3 -1 0")
        self.assertDecision(self.c.request("ALLOW f login 6"), "DENIED", None, None, -1)
        self.assertEqual(self.redis.keys("rl:*"), [], "a denied request wrote state")
        self.assertDecision(self.c.request("ALLOW f login 3"), "ALLOWED", 3, 0, 0)
        self.assertEqual(self.zcard("f", "login", 10000), 3)

    def test_seed_double_limit_scaled(self):
        """{1: 3, 60: 20} scaled to [3/100ms, 20/1s]: a client going as fast
        as it can gets 3 per 100 ms until 20 are used within the second."""
        log = []
        t0 = time.monotonic()
        allowed = []
        while len(allowed) < 20 and time.monotonic() - t0 < 0.95:
            s = time.monotonic()
            v = parse_decision(self.c.request("ALLOW g seed"))
            log.append((s, time.monotonic(), v))
            if v[0] == "ALLOWED":
                allowed.append((s, time.monotonic()))
            time.sleep(0.003)
        self.assertEqual(len(allowed), 20, [v for _, _, v in log])
        for i in range(len(allowed) - 3):
            self.assertGreaterEqual(allowed[i + 3][1] - allowed[i][0], 0.1 - 0.002,
                                    "4 allowed within 100 ms")
        for _ in range(10):
            s = time.monotonic()
            log.append((s, time.monotonic(), parse_decision(self.c.request("ALLOW g seed"))))
            self.assertEqual(log[-1][2][0], "DENIED", log[-1])
        for s, r, v in log:
            if v[0] == "DENIED":
                if v[1] == 3:
                    self.assertTrue(1 <= v[3] <= 100, v)
                else:
                    self.assertEqual(v[1], 20, v)
                    self.assertTrue(1 <= v[3] <= 1000, v)
        self.assertEqual(self.zcard("g", "seed", 1000), 20)
        self.assertLessEqual(self.zcard("g", "seed", 100), 3)
        # with the 100 ms window empty again, the 1 s limit binds alone
        time.sleep(0.11)
        self.assertLess(time.monotonic() - t0, 0.97, "machine too slow for this test's margins")
        self.assertDecision(self.c.request("ALLOW g seed"), "DENIED", 20, 0, (1, 1000))

    def test_peek_and_reset_cover_all_limits(self):
        self.c.pipeline(["ALLOW h login"] * 2)
        for _ in range(5):
            self.assertDecision(self.c.request("PEEK h login"), "ALLOWED", 3, 1, 0)
        self.assertEqual(self.zcard("h", "login", 1000), 2)
        self.assertEqual(self.zcard("h", "login", 10000), 2)
        self.assertEqual(self.c.request("RESET h login"), "OK")
        self.assertEqual(self.redis.call("EXISTS", key("h", "login", 1000),
                                         key("h", "login", 10000)), 0)
        self.assertEqual(self.c.request("PEEK h login"), "ALLOWED 3 3 0 0")


if __name__ == "__main__":
    unittest.main()
