"""Many concurrent clients on one key, and several daemons on one Redis,
allow exactly the limit."""

import threading
import unittest

from harness import DaemonTest, parse_decision, wait_until


def hammer(ports, user, action, threads, per_thread):
    """threads connections (spread over ports) each pipeline per_thread ALLOWs,
    all released together. Returns the list of decisions."""
    barrier = threading.Barrier(threads)
    results = []
    errors = []
    lock = threading.Lock()

    def run(i):
        from harness import Client
        try:
            with Client(port=ports[i % len(ports)], timeout=20) as c:
                c.request("PING")
                barrier.wait(10)
                got = c.pipeline(["ALLOW %s %s" % (user, action)] * per_thread, timeout=20)
            with lock:
                results.extend(parse_decision(r) for r in got)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            with lock:
                errors.append(repr(e))

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    if errors:
        raise AssertionError("client errors: %s" % errors[:5])
    if any(t.is_alive() for t in ts):
        raise AssertionError("clients still running after 60 s")
    return results


class ConcurrencyTest(DaemonTest):
    POLICIES = {
        "hot": "30/10s",
        "wide": "50/10s",
        "bucket": "{algorithm: funnel, capacity: 25, rate: 1/60s}",
        "pair": "[10/10s, 20/60s]",
        "shared": "40/10s",
    }

    def check_exact(self, results, limit, total):
        self.assertEqual(len(results), total)
        allowed = [v for v in results if v[0] == "ALLOWED"]
        self.assertEqual(len(allowed), limit,
                         "%d allowed of %d, limit %d" % (len(allowed), total, limit))
        # each allowed request saw its own remaining value: decisions are atomic
        self.assertEqual(sorted(v[2] for v in allowed), list(range(limit)))
        for v in results:
            self.assertEqual(v[1], limit)

    def test_50_connections_one_sliding_key(self):
        self.fresh(self.POLICIES)
        res = hammer([self.daemon.port], "hotuser", "hot", 50, 4)
        self.check_exact(res, 30, 200)
        self.assertEqual(self.redis.call("ZCARD", "rl:{hot:hotuser}:s10000"), 30)

    def test_50_connections_one_funnel_key(self):
        self.fresh(self.POLICIES)
        res = hammer([self.daemon.port], "fu", "bucket", 50, 2)
        self.check_exact(res, 25, 100)

    def test_50_connections_multi_limit(self):
        self.fresh(self.POLICIES)
        res = hammer([self.daemon.port], "mu", "pair", 50, 2)
        allowed = [v for v in res if v[0] == "ALLOWED"]
        self.assertEqual(len(allowed), 10)
        self.assertEqual(self.redis.call("ZCARD", "rl:{pair:mu}:s10000"), 10)
        self.assertEqual(self.redis.call("ZCARD", "rl:{pair:mu}:s60000"), 10)

    def test_200_connections_without_threads(self):
        self.fresh(self.POLICIES)
        clients = [self.daemon.client(timeout=20) for _ in range(200)]
        try:
            for c in clients:
                c.send("ALLOW w wide")
            res = [parse_decision(c.readline()) for c in clients]
        finally:
            for c in clients:
                c.close()
        self.check_exact(res, 50, 200)

    def test_two_daemons_share_one_limit(self):
        self.redis = self.start_redis()
        d1 = self.start_daemon(self.POLICIES, name="rl1")
        d2 = self.start_daemon(self.POLICIES, name="rl2", redis_opts={"connections": 4})
        res = hammer([d1.port, d2.port], "both", "shared", 40, 3)
        self.check_exact(res, 40, 120)
        with d1.client() as c1, d2.client() as c2:
            self.assertDecision(c1.request("PEEK both shared"), "DENIED", 40, 0)
            self.assertDecision(c2.request("PEEK both shared"), "DENIED", 40, 0)
            self.assertEqual(c1.request("RESET both shared"), "OK")
            # the other daemon hears of the RESET through Redis pub/sub, a
            # moment after the OK: its cached denial must go within 1 s
            wait_until(lambda: c2.request("PEEK both shared") == "ALLOWED 40 40 0 0", 1.0,
                       what="daemon 2 to see the RESET")

    def test_two_daemons_alternating(self):
        self.redis = self.start_redis()
        d1 = self.start_daemon(self.POLICIES, name="rl1")
        d2 = self.start_daemon(self.POLICIES, name="rl2")
        with d1.client() as c1, d2.client() as c2:
            got = []
            for i in range(40):
                got.append(parse_decision((c1 if i % 2 else c2).request("ALLOW alt hot")))
        self.assertEqual([v[0] for v in got], ["ALLOWED"] * 30 + ["DENIED"] * 10)
        self.assertEqual([v[2] for v in got[:30]], list(range(29, -1, -1)))


if __name__ == "__main__":
    unittest.main()
