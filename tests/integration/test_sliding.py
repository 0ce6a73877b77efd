"""sliding_window: the seeds' scenarios, exact counts, fields, expiry."""

import time
import unittest

from harness import DaemonTest, parse_decision


def key(user, action, window_ms, prefix="rl:"):
    return "%s{%s:%s}:s%d" % (prefix, action, user, window_ms)


class SlidingTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.fresh({
            "reply": "5/60s",
            "ip": "10/5s",
            "retry": "3/300ms",
            "sec": "5/1s",
            "three": "3/1s",
            "four": "4/1s",
            "ten": "10/60s",
            "two": "5/2s",
            "short": "3/300ms",
            "hundred": "100/60s",
        })
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def allow(self, user, action, cost=None):
        line = "ALLOW %s %s" % (user, action) + ("" if cost is None else " %d" % cost)
        return parse_decision(self.c.request(line))

    def test_reply_5_per_60s_called_20_times(self):
        replies = [self.c.request("ALLOW david reply") for _ in range(20)]
        allowed = [r for r in replies if r.startswith("ALLOWED")]
        self.assertEqual(len(allowed), 5, replies)
        for i, r in enumerate(replies[:5]):
            self.assertDecision(r, "ALLOWED", 5, 4 - i, 0, (59000, 60000))
        last_retry = 60001
        for r in replies[5:]:
            v = self.assertDecision(r, "DENIED", 5, 0, (1, 60000), (1, 60000))
            self.assertLessEqual(v[3], last_retry, "retry_after grows: %r" % replies)
            last_retry = v[3]
        # only the allowed requests were recorded
        self.assertEqual(self.redis.call("ZCARD", key("david", "reply", 60000)), 5)

    def test_10_requests_per_5s_per_ip(self):
        ips = ["10.0.0.%d" % i for i in range(1, 4)]
        got = {ip: [] for ip in ips}
        for _ in range(13):
            for ip in ips:
                got[ip].append(self.allow(ip, "ip")[0])
        for ip in ips:
            self.assertEqual(got[ip], ["ALLOWED"] * 10 + ["DENIED"] * 3, ip)

    def test_retrying_client_let_through_after_window(self):
        t_first = time.monotonic()
        for i in range(3):
            self.assertEqual(self.allow("rc", "retry")[:3], ("ALLOWED", 3, 2 - i))
        denials = 0
        deadline = time.monotonic() + 3.0
        while True:
            t_send = time.monotonic()
            v = self.allow("rc", "retry")
            if v[0] == "ALLOWED":
                break
            denials += 1
            self.assertTrue(1 <= v[3] <= 300, v)
            self.assertLess(time.monotonic(), deadline,
                            "still denied after 3 s while retrying every 20 ms: "
                            "denied retries must not be recorded")
            time.sleep(0.02)
        self.assertGreaterEqual(denials, 3)
        # the window really passed: the oldest entry is >= 300 ms old
        self.assertGreaterEqual(time.monotonic() - t_first, 0.295)
        self.assertLess(t_send - t_first, 0.3 + 1.0)

    def test_retry_after_is_when_it_passes(self):
        for _ in range(3):
            self.allow("ra", "three")
        v = self.allow("ra", "three")
        self.assertEqual(v[0], "DENIED")
        t_denied = time.monotonic()
        retry = v[3]
        self.assertTrue(700 <= retry <= 1000, v)
        # well before retry_after: still denied (and that denial records nothing)
        time.sleep(max(0, (retry - 350) / 1000.0 - (time.monotonic() - t_denied)))
        v2 = self.allow("ra", "three")
        self.assertEqual(v2[0], "DENIED", v2)
        self.assertTrue(1 <= v2[3] <= 400, v2)
        # just after retry_after: allowed
        time.sleep(max(0, (retry + 20) / 1000.0 - (time.monotonic() - t_denied)))
        self.assertEqual(self.allow("ra", "three")[:2], ("ALLOWED", 3))

    def test_end_of_second_boundary(self):
        """5 requests near the end of one second and 5 just after must not all
        pass a 5/1s window (a fixed window would let all 10 through)."""
        while time.time() % 1.0 < 0.80 or time.time() % 1.0 > 0.85:
            time.sleep(0.005)
        first = self.c.pipeline(["ALLOW bd sec"] * 5)
        while time.time() % 1.0 > 0.5 or time.time() % 1.0 < 0.05:
            time.sleep(0.005)
        second = self.c.pipeline(["ALLOW bd sec"] * 5)
        self.assertEqual([r.split()[0] for r in first], ["ALLOWED"] * 5, first)
        self.assertEqual([r.split()[0] for r in second], ["DENIED"] * 5, second)

    def test_window_slides(self):
        """4/1s: 2 at t=0, 2 at t=0.5s; at t=1.15s the first two have left
        the window, the last two have not: exactly 2 more pass."""
        t0 = time.monotonic()
        self.c.pipeline(["ALLOW ws four"] * 2)
        time.sleep(max(0, 0.5 - (time.monotonic() - t0)))
        r = self.c.pipeline(["ALLOW ws four"] * 3)
        self.assertEqual([x.split()[0] for x in r], ["ALLOWED", "ALLOWED", "DENIED"], r)
        t_mid = time.monotonic() - t0
        time.sleep(max(0, 1.15 - (time.monotonic() - t0)))
        r = self.c.pipeline(["ALLOW ws four"] * 3)
        t_end = time.monotonic() - t0
        self.assertLess(t_mid, 0.95, "machine too slow for this test's margins")
        self.assertLess(t_end, 1.45, "machine too slow for this test's margins")
        self.assertEqual([x.split()[0] for x in r], ["ALLOWED", "ALLOWED", "DENIED"], r)
        # the denial waits for the t=0.5s entries: ~350 ms
        self.assertTrue(1 <= parse_decision(r[2])[3] <= 500, r)

    def test_cost_counts_c(self):
        self.assertDecision(self.c.request("ALLOW cc ten 4"), "ALLOWED", 10, 6, 0)
        self.assertDecision(self.c.request("ALLOW cc ten 4"), "ALLOWED", 10, 2, 0)
        self.assertDecision(self.c.request("ALLOW cc ten 3"), "DENIED", 10, 2, (1, 60000))
        self.assertDecision(self.c.request("PEEK cc ten 2"), "ALLOWED", 10, 2, 0)
        self.assertDecision(self.c.request("ALLOW cc ten 2"), "ALLOWED", 10, 0, 0)
        self.assertDecision(self.c.request("ALLOW cc ten"), "DENIED", 10, 0, (1, 60000))

    def test_cost_above_limit_never(self):
        self.assertEqual(self.c.request("ALLOW cl ten 11"), "DENIED 10 10 -1 0")
        self.assertEqual(self.c.request("PEEK cl ten 11"), "DENIED 10 10 -1 0")
        self.allow("cl", "ten")
        self.assertDecision(self.c.request("ALLOW cl ten 11"), "DENIED", 10, 9, -1,
                            (59000, 60000))
        self.assertDecision(self.c.request("ALLOW cl ten 2147483647"), "DENIED", 10, 9, -1)
        # the cost-10 request still fits once the window passes: not -1
        self.assertDecision(self.c.request("ALLOW cl ten 10"), "DENIED", 10, 9, (1, 60000))
        self.assertEqual(self.redis.call("ZCARD", key("cl", "ten", 60000)), 1)

    def test_denial_fields_follow_later_consumption(self):
        """A denial repeated after the state changed must report the new state.
        5/2s: 1 unit at t0, 3 at t0+300ms (1 left). Cost 2 is denied until the
        t0 entry leaves (~1700 ms); a cost-1 request then takes the last unit,
        so cost 2 again must wait for the t0+300ms entries (~2000 ms) and see
        remaining 0."""
        self.assertDecision(self.c.request("ALLOW dc two 1"), "ALLOWED", 5, 4, 0)
        time.sleep(0.3)
        self.assertDecision(self.c.request("ALLOW dc two 3"), "ALLOWED", 5, 1, 0)
        self.assertDecision(self.c.request("ALLOW dc two 2"), "DENIED", 5, 1, (1550, 1700),
                            (1850, 2000))
        self.assertDecision(self.c.request("ALLOW dc two 1"), "ALLOWED", 5, 0, 0)
        self.assertDecision(self.c.request("ALLOW dc two 2"), "DENIED", 5, 0, (1850, 2000),
                            (1850, 2000))
        self.assertDecision(self.c.request("PEEK dc two 2"), "DENIED", 5, 0, (1850, 2000))
        self.assertDecision(self.c.request("ALLOW dc two 6"), "DENIED", 5, 0, -1, (1850, 2000))

    def test_retry_for_cost_waits_for_enough_entries(self):
        t0 = time.monotonic()
        self.allow("rw", "two", 1)
        time.sleep(0.4)
        self.allow("rw", "two", 4)
        e = (time.monotonic() - t0) * 1000
        # cost 1 waits for the first entry (~1600 ms), cost 2 for the second batch (~2000 ms)
        v1 = parse_decision(self.c.request("PEEK rw two 1"))
        v2 = parse_decision(self.c.request("PEEK rw two 2"))
        self.assertEqual(v1[:3], ("DENIED", 5, 0))
        self.assertEqual(v2[:3], ("DENIED", 5, 0))
        self.assertTrue(2000 - e - 100 <= v1[3] <= 1600 + 5, (v1, e))
        self.assertTrue(1850 <= v2[3] <= 2000, v2)
        self.assertGreater(v2[3] - v1[3], 300)

    def test_fields_plausible(self):
        t0 = time.monotonic()
        self.assertDecision(self.c.request("ALLOW fp two"), "ALLOWED", 5, 4, 0, (1900, 2000))
        time.sleep(0.3)
        self.assertDecision(self.c.request("ALLOW fp two"), "ALLOWED", 5, 3, 0, (1900, 2000))
        # reset_ms: until the newest entry leaves the window
        time.sleep(0.3)
        e = (time.monotonic() - t0) * 1000
        v = self.assertDecision(self.c.request("PEEK fp two"), "ALLOWED", 5, 3, 0)
        self.assertTrue(2000 - (e - 300) - 150 <= v[4] <= 2000 - 300 + 30, (v, e))
        self.c.pipeline(["ALLOW fp two"] * 3)
        v = self.assertDecision(self.c.request("ALLOW fp two"), "DENIED", 5, 0)
        e = (time.monotonic() - t0) * 1000
        # retry: until the first entry leaves the window
        self.assertTrue(2000 - e - 150 <= v[3] <= 2000 - 600 + 30, (v, e))
        self.assertTrue(1800 <= v[4] <= 2000, v)

    def test_key_expires_after_window(self):
        self.allow("ke", "short")
        k = key("ke", "short", 300)
        pttl = self.redis.call("PTTL", k)
        self.assertTrue(0 < pttl <= 300, pttl)
        self.allow("ke", "short")
        self.allow("ke", "short")
        for _ in range(5):
            self.assertEqual(self.allow("ke", "short")[0], "DENIED")
        self.assertTrue(0 < self.redis.call("PTTL", k) <= 300)
        time.sleep(0.45)
        self.assertEqual(self.redis.call("EXISTS", k), 0, "key outlived its window")

    def test_same_microsecond_members_unique(self):
        replies = self.c.pipeline(["ALLOW mu hundred"] * 50)
        for i, r in enumerate(replies):
            self.assertDecision(r, "ALLOWED", 100, 99 - i, 0)
        self.assertEqual(self.redis.call("ZCARD", key("mu", "hundred", 60000)), 50)
        self.assertDecision(self.c.request("PEEK mu hundred"), "ALLOWED", 100, 50, 0)

    def test_peek_reports_without_consuming(self):
        self.allow("pk", "ten", 7)
        for _ in range(5):
            self.assertDecision(self.c.request("PEEK pk ten 3"), "ALLOWED", 10, 3, 0)
            self.assertDecision(self.c.request("PEEK pk ten 4"), "DENIED", 10, 3, (1, 60000))
        self.assertEqual(self.redis.call("ZCARD", key("pk", "ten", 60000)), 7)
        self.assertDecision(self.c.request("ALLOW pk ten 3"), "ALLOWED", 10, 0, 0)


if __name__ == "__main__":
    unittest.main()
