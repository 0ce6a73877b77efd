"""100 Redis restarts (SIGKILL, restart on the same port) while clients send
requests: every request gets exactly one reply within redis.timeout +
margin (a real decision or the on_store_error answer), full service comes
back after each restart, and the daemon's open file descriptors and RSS end
where they started (within 5%), after a warm-up of 5 restarts."""

import os
import threading
import time
import unittest

from harness import (SLOW, STORE_MARGIN, DaemonTest, parse_decision, rss_env, rss_slack_kb,
                     wait_until)

POLICIES = {
    "pa": "{limits: [100000/60s], on_store_error: allow}",
    "pd": "{limits: [100000/60s], on_store_error: deny}",
    "ml": "{limits: [1000/1s, 100000/60s], on_store_error: allow}",
    "fu": "{algorithm: funnel, capacity: 100000, rate: 100000/1s, on_store_error: deny}",
}
TIMEOUT_MS = 100
CONNECTIONS = 2
BOUND = TIMEOUT_MS / 1000.0 + STORE_MARGIN
RESTARTS = int(os.environ.get("RL_RESTARTS", "100"))
WARMUP = 5


def classify(reply):
    v = parse_decision(reply)
    if v[2] == -1 and v[4] == -1:
        return "fallback"
    return "real"


class RestartsTest(DaemonTest):
    def load(self, idx, stop, stats):
        """Pipelines of 20 requests, one after the other, until stop."""
        c = self.daemon.client(timeout=10)
        acts = sorted(POLICIES)
        n = 0
        try:
            while not stop.is_set():
                lines = []
                for i in range(20):
                    n += 1
                    verb = "PEEK" if i % 5 == 4 else "ALLOW"
                    lines.append("%s t%d-%d %s" % (verb, idx, n % 500, acts[i % len(acts)]))
                t = time.monotonic()
                got = c.pipeline(lines, timeout=10)
                dt = time.monotonic() - t
                with stats["lock"]:
                    stats["max"] = max(stats["max"], dt)
                    stats["requests"] += len(lines)
                    for g in got:
                        stats[classify(g)] += 1
                time.sleep(0.002)
            stats["extra"] += len(c.extra(0.2))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            stats["errors"].append(repr(e))
        finally:
            c.close()

    def restart(self, down=0.0):
        self.redis.stop()
        time.sleep(down)
        self.redis = self.start_redis(port=self.port)

    def full_service(self, timeout=2.0):
        t = time.monotonic()
        n = [0]

        def ok():
            n[0] += 1
            lines = ["PEEK probe%d-%d pa" % (n[0], i) for i in range(12)]
            return all(classify(g) == "real" for g in self.c.pipeline(lines, timeout=10))
        wait_until(ok, timeout, interval=0.005, what="full service after a Redis restart")
        return time.monotonic() - t

    def settle(self, fd_target=None, timeout=3.0):
        """Full service and every daemon connection to Redis up (a
        connection in reconnect backoff holds no descriptor), then the fd
        count (== fd_target when given, else stable for 0.3 s); returns
        (fds, rss_kb)."""
        self.full_service()
        wait_until(lambda: self.redis.links() == CONNECTIONS + 1, 5.0 * SLOW, interval=0.02,
                   what="%d data connections and the RESET subscriber connected" % CONNECTIONS)
        if fd_target is not None:
            try:
                wait_until(lambda: self.daemon.fd_count() == fd_target, timeout, interval=0.02,
                           what="fd count back to %d" % fd_target)
            except AssertionError:
                pass  # reported by the caller's comparison
        else:
            last = [None]

            def stable():
                n = self.daemon.fd_count()
                same = n == last[0]
                last[0] = n
                return same
            wait_until(stable, timeout, interval=0.3, what="a stable fd count")
        return self.daemon.fd_count(), self.daemon.rss_kb()

    def test_100_restarts_under_load(self):
        self.redis = self.start_redis()
        self.port = self.redis.port
        self.daemon = self.start_daemon(POLICIES, redis_opts={"timeout": "%dms" % TIMEOUT_MS,
                                                              "connections": CONNECTIONS},
                                        env=rss_env())
        self.c = self.daemon.client(timeout=10)
        self.addCleanup(self.c.close)
        stop = threading.Event()
        stats = {"lock": threading.Lock(), "max": 0.0, "requests": 0, "real": 0,
                 "fallback": 0, "errors": [], "extra": 0}
        threads = [threading.Thread(target=self.load, args=(i, stop, stats), daemon=True)
                   for i in range(3)]
        for th in threads:
            th.start()
        try:
            for _ in range(WARMUP):
                self.restart()
                self.full_service()
            fds0, rss0 = self.settle()
            list0 = self.daemon.fd_list()
            t0 = time.monotonic()
            recov = []
            for i in range(RESTARTS):
                # down for 0 to 180 ms (past several backoff steps), up for 50 ms
                self.restart(down=(i % 10) * 0.02)
                recov.append(self.full_service())
                time.sleep(0.05)
            elapsed = time.monotonic() - t0
            fds1, rss1 = self.settle(fd_target=fds0)
            list1 = self.daemon.fd_list()
            # RSS may lag a moment behind the last frees
            if abs(rss1 - rss0) > rss0 * 0.05 + rss_slack_kb():
                time.sleep(0.5)
                rss1 = self.daemon.rss_kb()
        finally:
            stop.set()
            for th in threads:
                th.join(15)
        self.assertEqual(stats["errors"], [], "a load client failed")
        self.assertEqual(stats["extra"], 0, "reply lines beyond the requests")
        self.assertTrue(self.daemon.running(), self.daemon.log())
        print("\n[figures] %d restarts in %.1fs; %d requests (%d real, %d fallback), slowest "
              "pipeline %.3fs; full service after restart: max %.3fs, mean %.3fs; fds %d -> %d; "
              "RSS %d -> %d KiB (%+.1f%%)"
              % (RESTARTS, elapsed, stats["requests"], stats["real"], stats["fallback"],
                 stats["max"], max(recov), sum(recov) / len(recov), fds0, fds1, rss0, rss1,
                 100.0 * (rss1 - rss0) / rss0))
        self.assertGreater(stats["fallback"], 0, "Redis never seemed down to the clients")
        self.assertLess(stats["max"], BOUND, "a pipeline waited %.3fs" % stats["max"])
        self.assertLess(max(recov), 1.0 * max(1, SLOW / 2),
                        "full service took %.3fs after a restart" % max(recov))
        self.assertEqual(fds1, fds0, "fd count after %d restarts\nbefore: %s\nafter:  %s"
                         % (RESTARTS, list0, list1))
        self.assertLessEqual(abs(rss1 - rss0), rss0 * 0.05 + rss_slack_kb(),
                             "RSS %d -> %d KiB after %d restarts" % (rss0, rss1, RESTARTS))


if __name__ == "__main__":
    unittest.main()
