"""SIGHUP storms while clients pipeline requests: 100 reloads (every fifth
one a broken config) lose no request (each ALLOW counted exactly once, in
order: the remaining counts of each client's user go down by exactly one per
reply), a broken config never replaces the good one, and the daemon's fd
count and RSS stay where they were."""

import signal
import threading
import unittest

from harness import (SLOW, DaemonTest, free_port, make_config, parse_decision, rss_env,
                     rss_slack_kb, wait_until)

RELOADS = 100
THREADS = 4
CAP = 100000


class ReloadStormTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port = free_port()

    def cfg(self, marker, extra_policies=None, **top):
        pol = {"p": "%d/60s" % CAP, "f": "{algorithm: funnel, capacity: 50, rate: 10/1s}",
               marker: "3/7s"}
        pol.update(extra_policies or {})
        return make_config(["127.0.0.1:%d" % self.port],
                           {"address": self.redis.address, "timeout": "2s"}, pol, **top)

    def broken(self, i, marker):
        """Broken configs of several kinds; each would add `marker` if it loaded."""
        kind = i % 4
        good = self.cfg(marker)
        if kind == 0:
            return good + "surprise: 1\n"  # unknown key
        if kind == 1:
            return good.replace("3/7s", "3/0s")  # bad value
        if kind == 2:
            return good + "policies: [broken\n"  # YAML error
        return good.replace("redis:", "redis: {", 1)  # structure

    def traffic(self, idx, stop, out):
        """ALLOWs on this thread's own user, 50 per pipeline, until stop."""
        got = []
        try:
            with self.daemon.client(timeout=20) as c:
                while not stop.is_set():
                    got.extend(c.pipeline(["ALLOW storm%d p" % idx] * 50, timeout=20))
                    if len(got) >= CAP - 100:
                        break
                out["extra"] = c.extra(0.2)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            out["error"] = repr(e)
        out["got"] = got

    def reload_and_wait(self, text):
        n = len(self.daemon.log_lines())
        self.daemon.reload(text)
        return self.daemon.wait_log(r"^(info: reload: configuration .* loaded|error: reload failed)",
                                    start=n, timeout=5 * SLOW)

    def peek(self, action):
        return self.c.request("PEEK check %s" % action)

    def test_100_reloads_under_traffic(self):
        self.daemon = self.start_daemon(config=self.cfg("m0"), port=self.port, env=rss_env())
        self.c = self.daemon.client(timeout=10)
        self.addCleanup(self.c.close)
        stop = threading.Event()
        outs = [{} for _ in range(THREADS)]
        threads = [threading.Thread(target=self.traffic, args=(i, stop, outs[i]), daemon=True)
                   for i in range(THREADS)]
        for th in threads:
            th.start()
        good = "m0"
        fd0 = rss0 = None
        broken_count = 0
        try:
            for i in range(1, RELOADS + 11):
                if i == 11:  # after a warm-up of 10 reloads
                    fd0, rss0 = self.daemon.fd_count(), self.daemon.rss_kb()
                marker = "m%d" % i
                if i % 5 == 0:
                    line = self.reload_and_wait(self.broken(i, marker))
                    self.assertTrue(line.startswith("error: reload failed"), line)
                    broken_count += 1
                    # the running config stays: its marker answers, the broken one's does not
                    self.assertEqual(self.peek(good), "ALLOWED 3 3 0 0", "after broken reload %d" % i)
                    self.assertTrue(self.peek(marker).startswith("ERR unknown-action "),
                                    "broken config %d applied" % i)
                else:
                    line = self.reload_and_wait(self.cfg(marker))
                    self.assertTrue(line.startswith("info: reload: configuration"), line)
                    self.assertEqual(self.peek(marker), "ALLOWED 3 3 0 0", "reload %d" % i)
                    self.assertTrue(self.peek(good).startswith("ERR unknown-action "))
                    good = marker
                self.assertTrue(self.daemon.running())
            fd1, rss1 = self.daemon.fd_count(), self.daemon.rss_kb()
        finally:
            stop.set()
            for th in threads:
                th.join(30)
        total = 0
        for i, out in enumerate(outs):
            self.assertNotIn("error", out, "traffic thread %d" % i)
            got = out["got"]
            self.assertGreater(len(got), 0)
            for k, r in enumerate(got):
                v = parse_decision(r)
                if v[:3] != ("ALLOWED", CAP, CAP - 1 - k):
                    self.fail("thread %d reply %d: %r (a request lost, repeated or "
                              "answered out of order)" % (i, k, r))
            self.assertEqual(out["extra"], b"")
            zcard = self.redis.call("ZCARD", "rl:{p:storm%d}:s60000" % i)
            self.assertEqual(zcard, len(got), "thread %d: executed %d, answered %d"
                             % (i, zcard, len(got)))
            total += len(got)
        slack = rss_slack_kb()
        print("\n[figures] %d reloads (%d broken; fd/RSS measured over the last %d) under %d "
              "pipelining clients: %d requests, none lost; fds %d -> %d; RSS %d -> %d KiB "
              "(%+.1f%%)"
              % (RELOADS + 10, broken_count, RELOADS, THREADS, total, fd0, fd1, rss0, rss1,
                 100.0 * (rss1 - rss0) / rss0))
        self.assertEqual(fd1, fd0, "fd count after %d reloads" % RELOADS)
        self.assertLessEqual(abs(rss1 - rss0), rss0 * 0.05 + slack,
                             "RSS %d -> %d KiB after %d reloads" % (rss0, rss1, RELOADS))
        self.assertLogClean(self.daemon)

    def test_sighup_burst(self):
        """SIGHUPs sent back to back (they coalesce) while the file changes:
        the daemon ends up on the last good file, serving all along."""
        self.daemon = self.start_daemon(config=self.cfg("m0"), port=self.port)
        self.c = self.daemon.client(timeout=10)
        self.addCleanup(self.c.close)
        for i in range(1, 101):
            self.daemon.write_config(self.cfg("b%d" % i) if i % 3 else self.broken(i, "x%d" % i))
            self.daemon.signal(signal.SIGHUP)
            if i % 10 == 0:
                self.assertEqual(self.c.request("PING"), "PONG")
        self.daemon.write_config(self.cfg("last"))
        self.daemon.signal(signal.SIGHUP)
        wait_until(lambda: self.peek("last") == "ALLOWED 3 3 0 0", 5 * SLOW, interval=0.02,
                   what="the last config")
        self.assertTrue(self.daemon.running())
        self.assertDecision(self.c.request("ALLOW burst p"), "ALLOWED", CAP, CAP - 1)
        self.assertLogClean(self.daemon)


if __name__ == "__main__":
    unittest.main()
