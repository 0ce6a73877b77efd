"""SIGHUP: new snapshots apply at once, broken configs keep the old one,
restart-only keys are reported against what runs (on every reload until a
restart, or until the file goes back), in-flight requests are answered."""

import re
import signal
import socket
import threading
import time
import unittest

from harness import DaemonTest, free_port, make_config, scrape_metrics, wait_until


class ReloadTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port = free_port()

    def cfg(self, policies, listen=None, redis=None, **top):
        ropts = {"address": self.redis.address, "timeout": "2s"}
        ropts.update(redis or {})
        return make_config(listen or ["127.0.0.1:%d" % self.port], ropts, policies, **top)

    def start(self, policies, **kw):
        self.daemon = self.start_daemon(config=self.cfg(policies, **kw), port=self.port)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)
        return self.daemon

    def reload(self, text):
        n = len(self.daemon.log_lines())
        self.daemon.reload(text)
        return n

    def wait_peek(self, line, pred, timeout=5.0):
        last = []

        def check():
            last[:] = [self.c.request(line)]
            return pred(last[0])
        try:
            return wait_until(check, timeout, interval=0.02, what="reload to apply (%s)" % line)
        except AssertionError as e:
            raise AssertionError("%s; last reply %r; log:\n%s"
                                 % (e, last, "\n".join(self.daemon.log_lines()[-8:])))

    def test_policy_change_applies(self):
        self.start({"p": "2/60s"})
        self.c.pipeline(["ALLOW a p"] * 2)
        self.assertDecision(self.c.request("ALLOW a p"), "DENIED", 2, 0)
        self.reload(self.cfg({"p": "5/60s"}))
        self.wait_peek("PEEK a p", lambda r: r.startswith("ALLOWED 5 "))
        self.assertDecision(self.c.request("ALLOW a p"), "ALLOWED", 5, 2, 0)
        self.assertTrue(self.daemon.running())

    def test_algorithm_change_applies(self):
        self.start({"p": "2/60s"})
        self.reload(self.cfg({"p": "{algorithm: funnel, capacity: 7, rate: 1/1s}"}))
        self.wait_peek("PEEK f p", lambda r: r == "ALLOWED 7 7 0 0")
        self.c.request("ALLOW f p")
        self.assertIn(b"rl:{p:f}:f", self.redis.keys())

    def test_add_and_remove_policies(self):
        self.start({"old": "2/60s"})
        self.assertTrue(self.c.request("ALLOW a new").startswith("ERR unknown-action "))
        self.reload(self.cfg({"new": "3/60s"}))
        self.wait_peek("PEEK a new", lambda r: r == "ALLOWED 3 3 0 0")
        self.assertTrue(self.c.request("ALLOW a old").startswith("ERR unknown-action "))

    def check_broken(self, broken, marker):
        self.start({"p": "2/60s"})
        self.c.request("ALLOW a p")
        n = self.reload(broken)
        idx = broken.index(marker)
        line = broken.count("\n", 0, idx) + 1
        col = idx - (broken.rfind("\n", 0, idx) + 1) + 1
        pos = "%s:%d:%d:" % (self.daemon.config_path, line, col)
        self.daemon.wait_log(re.escape(pos), start=n)
        self.assertTrue(self.daemon.running())
        # the old snapshot still serves
        self.assertDecision(self.c.request("ALLOW a p"), "ALLOWED", 2, 0)
        self.assertEqual(self.c.request("PING"), "PONG")
        # and a later good reload still works
        self.reload(self.cfg({"p": "4/60s"}))
        self.wait_peek("PEEK a p", lambda r: r.startswith("ALLOWED 4 2 "))

    def test_broken_value_keeps_old(self):
        self.check_broken(self.cfg({"p": "2/60s", "q": "5/0s"}), "5/0s")

    def test_unknown_key_keeps_old(self):
        self.check_broken(self.cfg({"p": "9/60s"}) + "surprise: 1\n", "surprise")

    def test_yaml_error_keeps_old(self):
        self.start({"p": "2/60s"})
        self.c.request("ALLOW a p")
        n = self.reload(self.cfg({"p": "9/60s", "q": "[1/1s, 2/2s"}))
        self.daemon.wait_log(re.escape(self.daemon.config_path) + r":\d+:\d+: ", start=n)
        self.assertDecision(self.c.request("ALLOW a p"), "ALLOWED", 2, 0)

    def test_missing_file_keeps_old(self):
        self.start({"p": "2/60s"})
        import os
        os.rename(self.daemon.config_path, self.daemon.config_path + ".away")
        n = len(self.daemon.log_lines())
        self.daemon.signal(signal.SIGHUP)
        self.daemon.wait_log(re.escape(self.daemon.config_path), start=n)
        self.assertTrue(self.daemon.running())
        self.assertDecision(self.c.request("ALLOW a p"), "ALLOWED", 2, 1)

    def test_listen_change_needs_restart(self):
        self.start({"p": "2/60s"})
        new_port = free_port()
        n = self.reload(self.cfg({"p": "6/60s"}, listen=["127.0.0.1:%d" % new_port]))
        self.daemon.wait_log(r"(?i)^warn: .*restart", start=n)
        # the rest of the new config applies; the old listener stays
        self.wait_peek("PEEK a p", lambda r: r == "ALLOWED 6 6 0 0")
        with self.daemon.client() as c2:
            self.assertEqual(c2.request("PING"), "PONG")
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", new_port), timeout=1).close()

    def test_http_listener_options_change_needs_restart(self):
        """A listener's HTTP options are part of it: changing one is a
        pending restart, named with both values, not silently ignored."""
        hport = free_port()

        def http(opts):
            return "{address: \"127.0.0.1:%d\", protocol: http%s}" % (hport, opts)
        listen = lambda opts: ["127.0.0.1:%d" % self.port, http(opts)]  # noqa: E731
        self.daemon = self.start_daemon(config=make_config(
            listen(""), {"address": self.redis.address}, {"p": "2/60s"}, admin=False),
            port=self.port)
        for opts, shown in ((", deny_status: 403", "deny_status differs: running 429, file 403"),
                            (", user_header: X-User",
                             r"user_header differs: running \(none\), file X-User"),
                            (", trusted_proxies: [10.0.0.0/8]",
                             r"trusted_proxies differs: running \[127\.0\.0\.0/8 ::1/128\], "
                             r"file \[10\.0\.0\.0/8\]"),
                            (", legacy_headers: true",
                             "legacy_headers differs: running false, file true")):
            lines = self.reload_done(make_config(
                listen(opts), {"address": self.redis.address}, {"p": "2/60s"}, admin=False))
            warns = [ln for ln in lines if ln.startswith("warn: ")]
            self.assertEqual(len(warns), 1, lines)
            self.assertRegex(warns[0], r"^warn: reload: listen\[1\]\.%s; restart ratelimitd"
                             % shown)
        # back to what runs: nothing pending
        lines = self.reload_done(make_config(
            listen(""), {"address": self.redis.address}, {"p": "2/60s"}, admin=False))
        self.assertTrue(any(ln.endswith("no restart pending") for ln in lines), lines)

    def test_redis_address_change_needs_restart(self):
        self.start({"p": "2/60s"})
        other = self.start_redis()
        n = self.reload(self.cfg({"p": "3/60s"}, redis={"address": other.address}))
        self.daemon.wait_log(r"^warn: reload: redis\.address differs: running %s, file %s; "
                             r"restart" % (re.escape(self.redis.address),
                                           re.escape(other.address)), start=n)
        self.wait_peek("PEEK a p", lambda r: r == "ALLOWED 3 3 0 0")
        self.c.request("ALLOW a p")
        self.assertEqual(self.redis.keys(), [b"rl:{p:a}:s60000"])
        self.assertEqual(other.keys(), [])

    def reload_done(self, text):
        """Reloads with text; returns the log lines that reload wrote, up to
        and including its "configuration ... loaded" line."""
        n = self.reload(text)
        self.daemon.wait_log(r"^info: reload: configuration .* loaded", start=n)
        lines = self.daemon.log_lines()[n:]
        end = next(i for i, ln in enumerate(lines) if re.search(r"configuration .* loaded", ln))
        return lines[:end + 1]

    def test_restart_pending_until_restart_or_revert(self):
        """The file is compared with what runs, not with the previous file:
        a second SIGHUP with the same moved listener warns again, and the
        gauge stays 1 until the file names the running address again."""
        mport = free_port()
        metrics = '{listen: "127.0.0.1:%d"}' % mport
        self.start({"p": "2/60s"}, metrics=metrics)
        pending = lambda: scrape_metrics(mport)["ratelimitd_restart_pending"]  # noqa: E731
        self.assertEqual(pending(), 0)
        new_port = free_port()
        moved = self.cfg({"p": "2/60s"}, listen=["127.0.0.1:%d" % new_port], metrics=metrics)
        want = (r"^warn: reload: listen\[0\]\.address differs: running 127\.0\.0\.1:%d, "
                r"file 127\.0\.0\.1:%d; restart ratelimitd to apply it$" % (self.port, new_port))
        for attempt in (1, 2):
            lines = self.reload_done(moved)
            warns = [ln for ln in lines if ln.startswith("warn: ")]
            self.assertEqual(len(warns), 1, "reload %d: %r" % (attempt, lines))
            self.assertRegex(warns[0], want)
            self.assertEqual(pending(), 1, "reload %d" % attempt)
        # still listening where it started, not where the file says
        with self.daemon.client() as c2:
            self.assertEqual(c2.request("PING"), "PONG")
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", new_port), timeout=1).close()
        # the file goes back to the running address: no warning, gauge 0
        lines = self.reload_done(self.cfg({"p": "3/60s"}, metrics=metrics))
        self.assertFalse([ln for ln in lines if ln.startswith("warn: ")], lines)
        self.assertTrue(any(re.search(r"^info: reload: .*no restart pending$", ln)
                            for ln in lines), lines)
        self.assertEqual(pending(), 0)
        # and a reload that changes nothing restart-only says nothing about it
        lines = self.reload_done(self.cfg({"p": "4/60s"}, metrics=metrics))
        self.assertFalse([ln for ln in lines if "restart" in ln], lines)
        self.assertEqual(pending(), 0)

    def test_restart_pending_names_each_key_and_hides_passwords(self):
        mport = free_port()
        metrics = '{listen: "127.0.0.1:%d"}' % mport
        self.start({"p": "2/60s"}, metrics=metrics)
        secret = "s3cret-%d" % free_port()
        other_mport = free_port()
        lines = self.reload_done(self.cfg(
            {"p": "2/60s"}, redis={"password": secret, "database": 3},
            metrics='{listen: "127.0.0.1:%d"}' % other_mport))
        warns = sorted(ln for ln in lines if ln.startswith("warn: "))
        self.assertEqual(len(warns), 3, lines)
        self.assertRegex(warns[0], r"^warn: reload: metrics\.listen differs: running "
                         r"127\.0\.0\.1:%d, file 127\.0\.0\.1:%d; restart" % (mport, other_mport))
        self.assertRegex(warns[1], r"^warn: reload: redis\.database differs: running 0, "
                         r"file 3; restart")
        self.assertRegex(warns[2], r"^warn: reload: redis\.password differs from the running "
                         r"one \(not shown\); restart")
        self.assertNotIn(secret, self.daemon.log())
        # the metrics endpoint stays where it started
        self.assertEqual(scrape_metrics(mport)["ratelimitd_restart_pending"], 1)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", other_mport), timeout=1).close()
        # requests still go to the running Redis, database 0, without AUTH
        self.assertDecision(self.c.request("ALLOW a p"), "ALLOWED", 2, 1)
        self.assertEqual(self.redis.keys(), [b"rl:{p:a}:s60000"])
        self.reload_done(self.cfg({"p": "2/60s"}, metrics=metrics))
        self.assertEqual(scrape_metrics(mport)["ratelimitd_restart_pending"], 0)

    def test_prefix_change_applies(self):
        self.start({"p": "5/60s"})
        self.c.request("ALLOW a p")
        self.reload(self.cfg({"p": "5/60s"}, prefix='"new:"'))
        # a new prefix means new, empty state
        self.wait_peek("PEEK a p", lambda r: r == "ALLOWED 5 5 0 0")
        self.c.request("ALLOW a p")
        self.assertEqual(self.redis.keys(), [b"new:{p:a}:s60000", b"rl:{p:a}:s60000"])

    def test_on_store_error_change_applies(self):
        dead = "127.0.0.1:%d" % free_port()
        self.start({"p": "5/60s"}, redis={"address": dead, "timeout": "100ms"},
                   on_store_error="allow")
        self.assertEqual(self.c.request("ALLOW a p"), "ALLOWED 5 -1 0 -1")
        self.reload(self.cfg({"p": "5/60s"}, redis={"address": dead, "timeout": "100ms"},
                             on_store_error="deny"))
        self.wait_peek("ALLOW a p", lambda r: r == "DENIED 5 -1 1000 -1")

    def test_timeout_change_applies(self):
        self.start({"p": "5/60s"}, redis={"timeout": "5s"}, on_store_error="deny")
        self.reload(self.cfg({"p": "5/60s", "marker": "1/1s"}, redis={"timeout": "100ms"},
                             on_store_error="deny"))
        self.wait_peek("PEEK a marker", lambda r: r.startswith("ALLOWED 1 "))
        self.redis.sigstop()
        self.addCleanup(self.redis.sigcont)
        t = time.monotonic()
        r = self.c.request("ALLOW a p", timeout=10)
        dt = time.monotonic() - t
        self.redis.sigcont()
        self.assertEqual(r, "DENIED 5 -1 1000 -1")
        self.assertLess(dt, 1.0, "new redis.timeout (100ms) not applied")

    def test_max_line_change_applies(self):
        self.start({"p": "5/60s"})
        long_line = "PEEK %s p" % ("u" * 100)
        self.assertDecision(self.c.request(long_line), "ALLOWED", 5, 5)
        self.reload(self.cfg({"p": "5/60s", "marker": "1/1s"}, max_line=64))
        self.wait_peek("PEEK a marker", lambda r: r.startswith("ALLOWED 1 "))
        r = self.c.request(long_line)
        self.assertTrue(r.startswith("ERR line-too-long "), r)

    def test_inflight_request_finishes_under_old_snapshot(self):
        """A request waiting on Redis when SIGHUP arrives is answered under
        the policies it started with, even if its policy is removed."""
        self.start({"p": "2/60s", "keep": "1/1s"})
        th = self.redis.debug_sleep(0.6)
        clients = [self.daemon.client() for _ in range(3)]
        try:
            for i, c in enumerate(clients):
                c.send("ALLOW if%d p" % i)
            time.sleep(0.1)
            n = self.reload(self.cfg({"keep": "1/1s"}))
            self.daemon.wait_log(r".", start=n, timeout=5)
            for c in clients:
                self.assertDecision(c.readline(), "ALLOWED", 2, 1, 0)
        finally:
            for c in clients:
                c.close()
        th.join(5)
        self.wait_peek("ALLOW x p", lambda r: r.startswith("ERR unknown-action "))
        self.assertTrue(self.daemon.running())

    def test_requests_during_reload_storm(self):
        self.start({"p": "100000/60s"})
        a = self.cfg({"p": "100000/60s", "x": "1/1s"})
        b = self.cfg({"p": "100000/60s", "y": "2/2s"})
        res = {}

        def client():
            got = []
            with self.daemon.client(timeout=20) as c:
                for _ in range(20):
                    got.extend(c.pipeline(["ALLOW s p"] * 100, timeout=20))
            res["got"] = got
        th = threading.Thread(target=client, daemon=True)
        th.start()
        for i in range(20):
            self.daemon.reload(a if i % 2 else b)
            time.sleep(0.02)
        th.join(60)
        got = res.get("got")
        self.assertIsNotNone(got, "client failed during reloads")
        self.assertEqual(len(got), 2000)
        for i, r in enumerate(got):
            self.assertDecision(r, "ALLOWED", 100000, 100000 - 1 - i, 0)
        self.assertTrue(self.daemon.running())
        self.assertLogClean(self.daemon)

    def test_reload_logs_something(self):
        self.start({"p": "2/60s"})
        n = self.reload(self.cfg({"p": "3/60s"}))
        self.daemon.wait_log(r"^(info|warn): ", start=n)


if __name__ == "__main__":
    unittest.main()
