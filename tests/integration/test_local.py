"""on_store_error: local: while Redis cannot decide, the daemon decides in
its own memory with the same policies (a share of each limit); when Redis
is back, Redis decides again and the local counts are dropped. Real Redis
killed, restarted and flapping under real client load."""

import threading
import time

from harness import (SLOW, STORE_MARGIN, Client, DaemonTest, free_port, http_get, parse_decision,
                     rss_env, rss_slack_kb, scrape_metrics, wait_until)

POLICIES = {"login": "5/60s", "burst": "{algorithm: funnel, capacity: 6, rate: 1/1m}",
            "reply": "10/60s"}


class Load:
    """Threads sending ALLOW one at a time for users u0..u(n-1) of an
    action, recording (time sent, user, reply, seconds taken) until
    stopped."""

    def __init__(self, port, action, users=10, threads=4):
        self.port, self.action, self.users = port, action, users
        self.out, self.errors, self.lock = [], [], threading.Lock()
        self.stop_ev = threading.Event()
        self.sent = [0] * threads
        self.ts = [threading.Thread(target=self.run, args=(i,), daemon=True)
                   for i in range(threads)]
        for t in self.ts:
            t.start()

    def run(self, i):
        k = i
        try:
            with Client(port=self.port, timeout=10 * SLOW) as c:
                while not self.stop_ev.is_set():
                    user = "u%d" % (k % self.users)
                    k += 1
                    t0 = time.monotonic()
                    self.sent[i] += 1
                    rep = c.request("ALLOW %s %s" % (user, self.action))
                    with self.lock:
                        self.out.append((t0, user, rep, time.monotonic() - t0))
                    time.sleep(0.002)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            with self.lock:
                self.errors.append(repr(e))

    def stop(self):
        self.stop_ev.set()
        for t in self.ts:
            t.join(20 * SLOW)
        return self.out


class LocalTest(DaemonTest):
    def start(self, share=None, timeout="50ms", policies=POLICIES, env=None):
        self.redis = self.start_redis()
        self.mport = free_port()
        top = {"on_store_error": "local", "metrics": '{listen: "127.0.0.1:%d"}' % self.mport}
        if share:
            top["local_share"] = share
        self.daemon = self.start_daemon(policies, redis_opts={"timeout": timeout}, env=env,
                                        **top)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def metric(self, name):
        return scrape_metrics(self.mport).get(name)

    def test_redis_killed_under_load(self):
        """Every request answered by a real decision within the deadline,
        no user past the limit while Redis is down, Redis deciding again
        within 1 s of its return."""
        self.start()
        port = self.redis.port
        for i in range(10):  # each user used 3 of 5 in Redis
            self.c.pipeline(["ALLOW u%d login" % i] * 3)
        load = Load(self.daemon.port, "login")
        time.sleep(0.3 * SLOW)
        t_down = time.monotonic()
        self.redis.stop()
        self.daemon.wait_log(r"warn: redis cannot decide .*deciding locally", timeout=5 * SLOW)
        status, _, body = http_get(self.mport, "/health")
        self.assertEqual(status, 200, body)
        self.assertIn("degraded: redis unavailable; deciding locally", body)
        self.assertEqual(self.metric("ratelimitd_local_active"), 1)
        time.sleep(1.5 * SLOW)
        # Redis may answer before start_redis returns (the daemon reconnects
        # while it polls): the down window ends when Redis is started
        t_start = time.monotonic()
        self.redis = self.start_redis(port=port)
        t_up = time.monotonic()
        wait_until(lambda: self.metric("ratelimitd_local_active") == 0, 3 * SLOW,
                   what="Redis deciding again")
        t_back = time.monotonic()
        back = t_back - t_up
        self.assertLess(back, 1.0 * SLOW, "Redis decided again %.3f s after its return" % back)
        time.sleep(0.3 * SLOW)
        out = load.stop()
        self.assertEqual(load.errors, [])
        # exactly one reply per request, every one a decision, none late
        self.assertEqual(len(out), sum(load.sent))
        for t0, user, rep, took in out:
            v = parse_decision(rep)
            self.assertNotEqual(v[2], -1, "a fallback answer: %r" % rep)
            self.assertLess(took, 0.05 + STORE_MARGIN, "%r took %.3f s" % (rep, took))
        # while Redis was down (and after the first local decision): at most
        # the local limit per user; the local counts start from nothing.
        # Only replies that came back before the new Redis was even started:
        # the restarted, empty Redis allows 5 more of its own, and one that
        # answered while start_redis still polled was counted here (7 > 5
        # seen once, in a fresh clone's run)
        local = {}
        for t0, user, rep, took in out:
            if t_down < t0 and t0 + took < t_start and rep.startswith("ALLOWED"):
                local[user] = local.get(user, 0) + 1
        self.assertTrue(local, "no local decision seen")
        self.assertLessEqual(max(local.values()), 5, local)
        # after: Redis (empty, restarted) holds the limit again
        after = {}
        for t0, user, rep, took in out:
            if t0 > t_back and rep.startswith("ALLOWED"):
                after[user] = after.get(user, 0) + 1
        self.assertLessEqual(max(after.values() or [0]), 5, after)
        self.assertGreater(len(self.redis.keys("rl:*")), 0)
        m = scrape_metrics(self.mport)
        self.assertGreater(m['ratelimitd_decisions_total{result="allowed",source="local"}'], 0)
        self.assertGreater(m['ratelimitd_decisions_total{result="denied",source="local"}'], 0)
        self.assertEqual(m['ratelimitd_decisions_total{result="allowed",source="fallback"}']
                         + m['ratelimitd_decisions_total{result="denied",source="fallback"}'], 0)
        self.daemon.wait_log(r"info: redis decides again: \d+ local decisions made meanwhile")
        self.assertEqual(http_get(self.mport, "/health")[0], 200)
        print("\n[figures] Redis killed under load: %d requests, %d local decisions, slowest "
              "%.1f ms, Redis deciding again %.3f s after its return"
              % (len(out), sum(1 for o in out if t_down < o[0] < t_up),
                 1000 * max(o[3] for o in out), back))

    def test_share_and_pairs(self):
        """local_share cuts each limit; MALLOW decides every pair locally."""
        self.start(share="0.5")
        self.redis.stop()
        got = [self.c.request("ALLOW a reply") for _ in range(6)]
        self.assertEqual([g.split()[0] for g in got], ["ALLOWED"] * 5 + ["DENIED"])
        self.assertEqual(got[0], "ALLOWED 5 4 0 60000")
        # a funnel: capacity 6 cut to 3
        got = [self.c.request("ALLOW a burst") for _ in range(4)]
        self.assertEqual([g.split()[0] for g in got], ["ALLOWED"] * 3 + ["DENIED"])
        self.assertEqual(self.c.request("MALLOW b login b reply"), "ALLOWED 2 1 0 60000 1")
        self.assertDecision(self.c.request("PEEK b reply"), "ALLOWED", 5, 4, 0, (59000, 60000))
        # RESET needs Redis: an error, not a local reset
        self.assertTrue(self.c.request("RESET a reply").startswith("ERR store-unavailable"))

    def test_hung_redis(self):
        """Redis frozen (SIGSTOP): each request decided locally once its
        deadline passes; Redis decides again after SIGCONT."""
        self.start(timeout="100ms")
        self.assertEqual(self.c.request("ALLOW a login"), "ALLOWED 5 4 0 60000")
        self.redis.sigstop()
        try:
            t0 = time.monotonic()
            got = [self.c.request("ALLOW a login") for _ in range(6)]
            took = time.monotonic() - t0
        finally:
            self.redis.sigcont()
        # counted afresh locally: 5, then denied
        self.assertEqual([g.split()[:3] for g in got],
                         [["ALLOWED", "5", str(n)] for n in (4, 3, 2, 1, 0)]
                         + [["DENIED", "5", "0"]])
        self.assertLess(took, 6 * (0.1 + STORE_MARGIN))
        status, _, body = http_get(self.mport, "/health")
        self.assertEqual(status, 200)
        self.assertIn("degraded", body)
        # Redis again, with what it holds: the request before the freeze,
        # and any it had already been sent when it froze (it runs them on
        # SIGCONT, though their clients had their answers); the local
        # counts (5 used) are gone
        wait_until(lambda: self.c.request("PEEK a login")
                   and self.metric("ratelimitd_local_active") == 0, 3 * SLOW,
                   what="Redis deciding again")
        held = int(self.redis.call("ZCARD", "rl:{login:a}:s60000"))
        self.assertGreaterEqual(held, 1)
        self.assertDecision(self.c.request("PEEK a login"), "ALLOWED" if held < 5 else "DENIED",
                            5, 5 - held)

    def test_config(self):
        cases = [
            ("on_store_error: local\nlocal_share: 0.25\nmemory: {max_keys: 5000}\n"
             "policies: {a: 1/1s}\n", None),
            ("policies: {a: {limits: [1/1s], on_store_error: local}}\nmemory: {max_keys: 5000}\n",
             None),
            ("local_share: 0\npolicies: {a: 1/1s}\n",
             "t.yaml:1:14: local_share: must be a number above 0 and at most 1"),
            ("local_share: 1.5\npolicies: {a: 1/1s}\n",
             "t.yaml:1:14: local_share: must be a number above 0 and at most 1"),
            ("local_share: 1e-3\npolicies: {a: 1/1s}\n",
             "t.yaml:1:14: local_share: must be a number above 0 and at most 1"),
            ("on_store_error: locally\npolicies: {a: 1/1s}\n",
             "t.yaml:1:17: on_store_error: must be allow, deny, error or local"),
        ]
        self.assertConfigChecks(cases)

    def test_flapping_redis(self):
        """Redis up 200 ms, down 200 ms, for 10 s: every request gets exactly
        one reply, each a decision, and the daemon's memory stays flat."""
        self.start(env=rss_env())  # under ASan: no quarantine of freed memory
        port = self.redis.port
        load = Load(self.daemon.port, "reply", users=50, threads=4)
        rss0 = None
        t_end = time.monotonic() + 10
        flips = 0
        while time.monotonic() < t_end:
            time.sleep(0.2)
            self.redis.stop()
            time.sleep(0.2)
            self.redis = self.start_redis(port=port)
            flips += 1
            if flips == 5:
                rss0 = self.daemon.rss_kb()
        out = load.stop()
        self.assertEqual(load.errors, [])
        self.assertEqual(len(out), sum(load.sent))
        bad = [rep for _, _, rep, _ in out if parse_decision(rep)[2] == -1]
        self.assertEqual(bad, [])
        m = scrape_metrics(self.mport)
        self.assertGreater(m['ratelimitd_decisions_total{result="allowed",source="local"}'], 0)
        self.assertGreater(m['ratelimitd_decisions_total{result="allowed",source="redis"}'], 0)
        grew = self.daemon.rss_kb() - rss0
        self.assertLess(grew, 2048 + rss_slack_kb(), "RSS grew %d kB over the last flips" % grew)
        self.assertGreaterEqual(flips, 15)
        print("\n[figures] flapping Redis: %d flips, %d requests, every one answered "
              "by a decision; RSS +%d kB over the last %d flips"
              % (flips, len(out), grew, flips - 5))


if __name__ == "__main__":
    import unittest
    unittest.main()
