"""funnel (GCRA): bursts, leaking, retry/reset fields, key expiry."""

import time
import unittest

from harness import DaemonTest, parse_decision


def fkey(user, action, prefix="rl:"):
    return "%s{%s:%s}:f" % (prefix, action, user)


class FunnelTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.fresh({
            "upload": "{algorithm: funnel, capacity: 15, rate: 30/60s}",
            "seed": "{algorithm: funnel, capacity: 2, rate: 1/200ms}",
            "drip": "{algorithm: funnel, capacity: 3, rate: 1/300ms}",
        })
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def test_capacity_15_rate_30_per_60s(self):
        replies = self.c.pipeline(["ALLOW u upload"] * 16)
        for i, r in enumerate(replies[:15]):
            self.assertDecision(r, "ALLOWED", 15, 14 - i, 0, (2000 * (i + 1) - 100, 2000 * (i + 1)))
        self.assertDecision(replies[15], "DENIED", 15, 0, (1900, 2000), (29900, 30000))
        # denied requests leave the funnel as it was
        before = self.redis.call("GET", fkey("u", "upload"))
        more = self.c.pipeline(["ALLOW u upload"] * 5)
        self.assertTrue(all(r.startswith("DENIED 15 0 ") for r in more), more)
        self.assertEqual(self.redis.call("GET", fkey("u", "upload")), before)

    def test_seed_capacity_2_leaking(self):
        """The seeds' funnel (capacity 2, 0.5/s) scaled to 1 per 200 ms:
        requests every 50 ms for 2 s."""
        interval = 0.2
        log = []
        t_start = time.monotonic()
        while time.monotonic() - t_start < 2.0:
            s = time.monotonic()
            v = parse_decision(self.c.request("ALLOW s seed"))
            log.append((s, time.monotonic(), v))
            self.assertIn(v[0], ("ALLOWED", "DENIED"))
            self.assertEqual(v[1], 2)
            time.sleep(max(0, 0.05 - (time.monotonic() - s)))
        first_send, first_recv = log[0][0], log[0][1]
        allowed = 0
        for s, r, v in log:
            if v[0] == "ALLOWED":
                allowed += 1
                # GCRA bound: never more than capacity + elapsed/interval
                self.assertLessEqual(allowed, 2 + (r - first_send) / interval + 1e-6,
                                     "too many allowed by %.3fs" % (r - first_send))
                self.assertEqual(v[3], 0)
            else:
                self.assertTrue(1 <= v[3] <= 200, v)
        last_send = log[-1][0]
        expected = 2 + (last_send - first_recv) / interval
        self.assertLessEqual(abs(allowed - expected), 1.5,
                             "allowed %d, expected ~%.1f over %.2fs"
                             % (allowed, expected, last_send - first_send))
        self.assertGreater(len(log) - allowed, 10, "too few denials")

    def test_drains_one_per_interval(self):
        r = self.c.pipeline(["ALLOW d drip"] * 4)
        self.assertEqual([x.split()[0] for x in r], ["ALLOWED"] * 3 + ["DENIED"], r)
        t_denied = time.monotonic()
        retry = parse_decision(r[3])[3]
        self.assertTrue(250 <= retry <= 300, r)
        time.sleep(max(0, (retry + 20) / 1000.0 - (time.monotonic() - t_denied)))
        self.assertDecision(self.c.request("ALLOW d drip"), "ALLOWED", 3, 0, 0, (600, 900))
        self.assertDecision(self.c.request("ALLOW d drip"), "DENIED", 3, 0, (200, 300))

    def test_refills_completely(self):
        self.c.pipeline(["ALLOW rf drip"] * 3)
        time.sleep(0.95)
        self.assertEqual(self.c.request("PEEK rf drip"), "ALLOWED 3 3 0 0")
        r = self.c.pipeline(["ALLOW rf drip"] * 4)
        self.assertEqual([x.split()[0] for x in r], ["ALLOWED"] * 3 + ["DENIED"], r)

    def test_key_expires_once_empty(self):
        k = fkey("ke", "seed")
        self.assertEqual(self.c.request("PEEK ke seed"), "ALLOWED 2 2 0 0")
        self.assertEqual(self.redis.call("EXISTS", k), 0, "PEEK created state")
        self.c.request("ALLOW ke seed")
        pttl = self.redis.call("PTTL", k)
        self.assertTrue(0 < pttl <= 200, pttl)
        self.c.request("ALLOW ke seed")
        pttl = self.redis.call("PTTL", k)
        self.assertTrue(200 < pttl <= 400, pttl)
        time.sleep(0.5)
        self.assertEqual(self.redis.call("EXISTS", k), 0, "funnel key outlived emptiness")
        self.assertEqual(self.c.request("PEEK ke seed"), "ALLOWED 2 2 0 0")

    def test_cost(self):
        self.assertDecision(self.c.request("ALLOW c upload 5"), "ALLOWED", 15, 10, 0,
                            (9900, 10000))
        # 11 more would need one unit more than fits: one interval (2000 ms)
        self.assertDecision(self.c.request("ALLOW c upload 11"), "DENIED", 15, 10,
                            (1900, 2000), (9900, 10000))
        self.assertDecision(self.c.request("PEEK c upload 11"), "DENIED", 15, 10, (1900, 2000))
        self.assertDecision(self.c.request("ALLOW c upload 16"), "DENIED", 15, 10, -1)
        self.assertDecision(self.c.request("ALLOW c upload 10"), "ALLOWED", 15, 0, 0,
                            (29900, 30000))

    def test_denial_fields_follow_later_consumption(self):
        """retry_after is when this same request would pass: after a cost-1
        request takes the last unit, a repeated cost-2 request must wait two
        intervals, not the one it was told before."""
        self.assertDecision(self.c.request("ALLOW dl upload 14"), "ALLOWED", 15, 1, 0)
        self.assertDecision(self.c.request("ALLOW dl upload 2"), "DENIED", 15, 1, (1900, 2000),
                            (27900, 28000))
        self.assertDecision(self.c.request("ALLOW dl upload 1"), "ALLOWED", 15, 0, 0)
        self.assertDecision(self.c.request("ALLOW dl upload 2"), "DENIED", 15, 0, (3900, 4000),
                            (29900, 30000))
        self.assertDecision(self.c.request("PEEK dl upload 2"), "DENIED", 15, 0, (3900, 4000))
        self.assertDecision(self.c.request("ALLOW dl upload 16"), "DENIED", 15, 0, -1,
                            (29900, 30000))

    def test_cost_above_capacity_untouched(self):
        self.assertEqual(self.c.request("ALLOW x upload 16"), "DENIED 15 15 -1 0")
        self.assertEqual(self.redis.call("EXISTS", fkey("x", "upload")), 0)

    def test_peek_consumes_nothing(self):
        self.c.pipeline(["ALLOW p upload"] * 3)
        before = self.redis.call("GET", fkey("p", "upload"))
        for _ in range(10):
            self.assertDecision(self.c.request("PEEK p upload"), "ALLOWED", 15, 12, 0)
        self.assertEqual(self.redis.call("GET", fkey("p", "upload")), before)
        self.assertDecision(self.c.request("ALLOW p upload"), "ALLOWED", 15, 11, 0)

    def test_reset(self):
        self.c.pipeline(["ALLOW r upload"] * 15)
        self.assertTrue(self.c.request("ALLOW r upload").startswith("DENIED"))
        self.assertEqual(self.c.request("RESET r upload"), "OK")
        self.assertEqual(self.redis.call("EXISTS", fkey("r", "upload")), 0)
        self.assertDecision(self.c.request("ALLOW r upload"), "ALLOWED", 15, 14, 0)


if __name__ == "__main__":
    unittest.main()
