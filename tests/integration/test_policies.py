"""What a policy can say besides its limits: shadow mode (decided and
counted, always answered ALLOWED), per policy and for the whole file, and
how a reload turns it on and off; bans after repeated denials, shared by
every daemon on the Redis; per-user overrides (other limits, unlimited,
blocked) over the line protocol and HTTP, and across a reload."""

import re
import time
import unittest

from harness import (DaemonTest, free_port, http_get, make_config, parse_decision,
                     scrape_metrics, wait_until)


class ShadowTest(DaemonTest):
    def start(self, policies, **top):
        self.mport = free_port()
        self.daemon = self.start_daemon(policies, metrics='{listen: "127.0.0.1:%d"}' % self.mport,
                                        **top)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def metric(self, name):
        return scrape_metrics(self.mport).get(name, 0)

    def test_shadow_policy_decides_counts_and_allows(self):
        self.redis = self.start_redis()
        self.start({"sh": "{limits: [2/60s], shadow: true}", "real": "2/60s"})
        got = [parse_decision(self.c.request("ALLOW u sh")) for _ in range(5)]
        # always allowed, with the true remaining; nothing to wait for
        self.assertEqual([v[:4] for v in got],
                         [("ALLOWED", 2, 1, 0), ("ALLOWED", 2, 0, 0)] + [("ALLOWED", 2, 0, 0)] * 3)
        # decided as usual: only the two really allowed were recorded
        self.assertEqual(self.redis.call("ZCARD", "rl:{sh:u}:s60000"), 2)
        self.assertEqual(self.metric('ratelimitd_action_shadow_denied_total{action="sh"}'), 3)
        self.assertEqual(self.metric("ratelimitd_shadow_denied_total"), 3)
        self.assertEqual(self.metric(
            'ratelimitd_action_decisions_total{action="sh",result="denied"}'), 3)
        # PEEK says the same; a policy not in shadow mode denies
        self.assertEqual(parse_decision(self.c.request("PEEK u sh"))[:2], ("ALLOWED", 2))
        self.c.pipeline(["ALLOW u real"] * 2)
        self.assertEqual(parse_decision(self.c.request("ALLOW u real"))[0], "DENIED")
        # logged, but not once per denial
        lines = [ln for ln in self.daemon.log_lines() if "shadow:" in ln]
        self.assertGreaterEqual(len(lines), 1)
        self.assertLess(len(lines), 4, lines)
        self.assertRegex(lines[0], r"^info: shadow: sh would be denied for u")

    def test_global_shadow_and_opt_out_and_reload(self):
        self.redis = self.start_redis()
        self.start({"a": "1/60s", "strict": "{limits: [1/60s], shadow: false}"}, shadow="true")
        self.assertEqual([parse_decision(self.c.request("ALLOW u a"))[0] for _ in range(3)],
                         ["ALLOWED"] * 3)
        self.assertEqual([parse_decision(self.c.request("ALLOW u strict"))[0] for _ in range(2)],
                         ["ALLOWED", "DENIED"])
        # the rollout is over: the same limits now deny, from the state kept
        n = len(self.daemon.log_lines())
        self.daemon.reload(make_config(["127.0.0.1:%d" % self.daemon.port],
                                       {"address": self.redis.address},
                                       {"a": "1/60s", "strict": "1/60s"},
                                       metrics='{listen: "127.0.0.1:%d"}' % self.mport))
        self.daemon.wait_log(r"^info: reload: configuration .* loaded", start=n)
        self.assertEqual(parse_decision(self.c.request("ALLOW u a"))[0], "DENIED")
        log = "\n".join(self.daemon.log_lines()[n:])
        self.assertRegex(log, re.compile(r"^info: reload: shadow true -> false$", re.M))
        self.assertRegex(log, re.compile(r"^info: reload: policy strict changed: "
                                         r"sliding_window 1/1m$", re.M))
        self.assertEqual(self.metric('ratelimitd_action_shadow_denied_total{action="a"}'), 2)


class BanTest(DaemonTest):
    POLICIES = {
        "login": "{limits: [2/60s], ban: {after: 3, within: 1m, for: 10m}}",
        "quick": "{limits: [1/200ms], ban: {after: 2, within: 10s, for: 3s}}",
        "plain": "1/60s",
    }

    def test_ban_after_repeated_denials_shared_and_reset(self):
        self.redis = self.start_redis()
        d1 = self.start_daemon(self.POLICIES, name="rl1")
        d2 = self.start_daemon(self.POLICIES, name="rl2")
        c1, c2 = d1.client(), d2.client()
        self.addCleanup(c1.close)
        self.addCleanup(c2.close)
        got = [parse_decision(c1.request("ALLOW mallory login")) for _ in range(4)]
        self.assertEqual([v[0] for v in got], ["ALLOWED"] * 2 + ["DENIED"] * 2)
        self.assertLessEqual(got[3][3], 60000)
        # PEEK is not a denial to count; the third ALLOW denied is, and bans
        self.assertEqual(parse_decision(c1.request("PEEK mallory login"))[0], "DENIED")
        v = parse_decision(c2.request("ALLOW mallory login"))
        self.assertEqual(v[:3], ("DENIED", 2, 0))
        self.assertTrue(599000 <= v[3] <= 600000 and v[4] == v[3], v)
        # banned through the other daemon too, and the ban is one key
        v = parse_decision(c1.request("ALLOW mallory login"))
        self.assertTrue(598000 <= v[3] <= 600000, v)
        self.assertTrue(0 < self.redis.call("PTTL", "rl:{login:mallory}:b") <= 600000)
        # others are not affected; RESET lifts the ban everywhere
        self.assertEqual(parse_decision(c1.request("ALLOW alice login"))[0], "ALLOWED")
        self.assertEqual(c1.request("RESET mallory login"), "OK")
        self.assertEqual(self.redis.keys("rl:{login:mallory}*"), [])
        wait_until(lambda: c2.request("ALLOW mallory login").startswith("ALLOWED "), 2.0,
                   what="daemon 2 to see the RESET lift the ban")

    def test_ban_ends(self):
        self.redis = self.start_redis()
        d = self.start_daemon(self.POLICIES)
        c = d.client()
        self.addCleanup(c.close)
        self.assertEqual(parse_decision(c.request("ALLOW eve quick"))[0], "ALLOWED")
        self.assertEqual(parse_decision(c.request("ALLOW eve quick"))[0], "DENIED")
        v = parse_decision(c.request("ALLOW eve quick"))  # the second denial: banned 3 s
        t_ban = time.monotonic()
        self.assertEqual(v[0], "DENIED")
        self.assertTrue(2900 <= v[3] <= 3000, v)
        # the 200 ms window has passed, the ban has not
        time.sleep(0.3)
        v = parse_decision(c.request("ALLOW eve quick"))
        self.assertEqual(v[0], "DENIED", v)
        self.assertTrue(1 <= v[3] <= 2700, v)
        time.sleep(max(0, 3.05 - (time.monotonic() - t_ban)))
        self.assertEqual(parse_decision(c.request("ALLOW eve quick"))[0], "ALLOWED")
        # a policy without a ban never bans
        for _ in range(5):
            c.request("ALLOW eve plain")
        self.assertEqual(self.redis.keys("rl:{plain:eve}:b"), [])


OVERRIDES = """{limits: [2/1m], overrides: {customer-42: [5/1m], "internal-*": unlimited,
          abuser-7: blocked, "partner-*": {limits: 3/1m}, "partner-big-*": [4/1m, 100/1h]}}"""


class OverridesTest(DaemonTest):
    def start(self, api=OVERRIDES):
        self.mport, self.hport = free_port(), free_port()
        self.port = free_port()
        self.daemon = self.start_daemon(config=self.config(api), port=self.port)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def config(self, api):
        return make_config(["127.0.0.1:%d" % self.port,
                            '{address: "127.0.0.1:%d", protocol: http, admin: true}' % self.hport],
                           {"address": self.redis.address}, {"api": api, "other": "1/1m"},
                           admin=False, metrics='{listen: "127.0.0.1:%d"}' % self.mport)

    def run4(self, user):
        return [self.c.request(x) for x in ["ALLOW %s api" % user] * 3 + ["PEEK %s api" % user]]

    def test_each_kind_and_the_most_specific_wins(self):
        self.redis = self.start_redis()
        self.start()
        allowed = lambda rs: [r.split()[0] for r in rs]  # noqa: E731
        self.assertEqual(allowed(self.run4("joe")), ["ALLOWED"] * 2 + ["DENIED"] * 2)
        r = self.run4("customer-42")
        self.assertEqual([parse_decision(x)[:3] for x in r],
                         [("ALLOWED", 5, 4), ("ALLOWED", 5, 3), ("ALLOWED", 5, 2),
                          ("ALLOWED", 5, 2)])
        self.assertEqual(self.run4("internal-build"), ["ALLOWED -1 -1 0 -1"] * 4)
        self.assertEqual(self.run4("abuser-7"), ["DENIED 2 0 -1 -1"] * 4)
        self.assertEqual([parse_decision(x)[1] for x in self.run4("partner-a")], [3] * 4)
        self.assertEqual([parse_decision(x)[1] for x in self.run4("partner-big-b")], [4] * 4)
        self.assertEqual([parse_decision(x)[1] for x in self.run4("partner-big")], [3] * 4)
        # unlimited and blocked store nothing; the others use the usual keys
        self.assertEqual(sorted(self.redis.keys("rl:*")), sorted([
            b"rl:{api:joe}:s60000", b"rl:{api:customer-42}:s60000",
            b"rl:{api:partner-a}:s60000", b"rl:{api:partner-big-b}:s60000",
            b"rl:{api:partner-big-b}:s3600000", b"rl:{api:partner-big}:s60000"]))
        # overrides belong to their policy only
        self.assertEqual(allowed([self.c.request("ALLOW internal-build other")] * 1 +
                                 [self.c.request("ALLOW internal-build other")]),
                         ["ALLOWED", "DENIED"])
        m = scrape_metrics(self.mport)
        self.assertEqual(m['ratelimitd_decisions_total{result="allowed",source="override"}'], 4)
        self.assertEqual(m['ratelimitd_decisions_total{result="denied",source="override"}'], 4)
        # over HTTP: unlimited announces no limit; blocked has no Retry-After
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.hport, timeout=5)
        self.addCleanup(conn.close)
        conn.request("GET", "/v1/allow?user=internal-1&action=api")
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, b'{"allowed":true,"limit":-1,'
                         b'"remaining":-1,"retry_after_ms":0,"reset_ms":-1}\n'))
        self.assertIsNone(r.getheader("RateLimit-Policy"))
        conn.request("GET", "/auth/api", headers={"X-Forwarded-For": "10.0.0.1"})
        r = conn.getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        conn.request("GET", "/v1/allow?user=abuser-7&action=api")
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (429, b'{"allowed":false,"limit":2,'
                         b'"remaining":0,"retry_after_ms":-1,"reset_ms":-1}\n'))
        self.assertIsNone(r.getheader("Retry-After"))
        self.assertEqual(r.getheader("RateLimit-Policy"), '"api";q=2;w=60')
        self.assertIsNone(r.getheader("RateLimit"))

    def test_reset_and_reload(self):
        self.redis = self.start_redis()
        self.start()
        self.run4("customer-42")
        self.assertEqual(self.c.request("RESET customer-42 api"), "ERR forbidden "
                         "RESET needs a listener with admin: true")
        st, _, _ = http_get(self.hport, "/v1/reset?user=customer-42&action=api", method="POST")
        self.assertEqual(st, 200)
        self.assertEqual(self.redis.keys("rl:{api:customer-42}*"), [])
        self.run4("customer-42")
        # the override is removed by a reload: the user is back to 2/1m, with
        # the 3 units already used in the same window (the key is the same)
        n = len(self.daemon.log_lines())
        self.daemon.reload(self.config('{limits: [2/1m], overrides: {"internal-*": unlimited}}'))
        self.daemon.wait_log(r"^info: reload: configuration .* loaded", start=n)
        log = "\n".join(self.daemon.log_lines()[n:])
        self.assertRegex(log, re.compile(r"^info: reload: policy api changed: "
                                         r"sliding_window 2/1m overrides 1$", re.M))
        self.assertEqual(parse_decision(self.c.request("PEEK customer-42 api"))[:3],
                         ("DENIED", 2, 0))
        self.assertEqual(self.c.request("ALLOW abuser-7 api").split()[0], "ALLOWED")


LIVE = {"api": "{limits: [2/1m], overrides: {static-vip: [5/1m]}}",
        "up": "{algorithm: funnel, capacity: 3, rate: 1/1m}"}


class LiveOverridesTest(DaemonTest):
    """OVERRIDE, UNOVERRIDE and OVERRIDES on an admin listener: kept in
    Redis (the hash rl:overrides), shared by every daemon on it, kept across
    daemon restarts and reloads, with an optional expiry."""

    def admin(self, d):
        c = d.client()
        self.addCleanup(c.close)
        return c

    def listing(self, c):
        out = []
        for i in range(100):
            r = c.request("OVERRIDES %d" % i)
            if r.startswith("END "):
                self.assertEqual(int(r.split()[1]), len(out))
                return out
            w = r.split()
            self.assertEqual((w[0], int(w[1])), ("OVERRIDE", i), r)
            out.append((w[2], w[3], w[4], int(w[5])))
        self.fail("no END")

    def test_set_list_clear_and_errors(self):
        self.redis = self.start_redis()
        self.mport = free_port()
        d = self.start_daemon(LIVE, metrics='{listen: "127.0.0.1:%d"}' % self.mport)
        c = self.admin(d)
        ok = c.pipeline(["OVERRIDE bob api unlimited", "OVERRIDE eve api blocked 1h",
                         "OVERRIDE carol api 4/1m,10/1h", "OVERRIDE cap up 5,1/1s",
                         "OVERRIDE static-vip api blocked"])
        self.assertEqual(ok, ["OK"] * 5)
        # answered once Redis has it: applied here from the next request on
        self.assertEqual(c.request("ALLOW bob api"), "ALLOWED -1 -1 0 -1")
        self.assertEqual(c.request("ALLOW eve api"), "DENIED 2 0 -1 -1")
        self.assertEqual(parse_decision(c.request("ALLOW carol api"))[:3], ("ALLOWED", 4, 3))
        self.assertEqual(parse_decision(c.request("ALLOW cap up"))[:3], ("ALLOWED", 5, 4))
        # a run-time override wins over the file's
        self.assertEqual(c.request("ALLOW static-vip api"), "DENIED 2 0 -1 -1")
        got = self.listing(c)
        self.assertEqual([g[:3] for g in got],
                         [("bob", "api", "unlimited"), ("carol", "api", "4/1m,10/1h"),
                          ("eve", "api", "blocked"), ("static-vip", "api", "blocked"),
                          ("cap", "up", "5,1/1s")])
        self.assertTrue(3590000 <= got[2][3] <= 3600000, got)
        self.assertEqual([g[3] for g in got if g[0] != "eve"], [-1] * 4)
        self.assertEqual(self.redis.call("HLEN", "rl:overrides"), 5)
        self.assertEqual(scrape_metrics(self.mport)["ratelimitd_overrides_live"], 5)
        # cleared: the file's override and the policy are back
        self.assertEqual(c.pipeline(["UNOVERRIDE static-vip api", "UNOVERRIDE bob api",
                                     "UNOVERRIDE nobody api"]), ["OK"] * 3)
        self.assertEqual(parse_decision(c.request("ALLOW static-vip api"))[:2], ("ALLOWED", 5))
        self.assertEqual(parse_decision(c.request("ALLOW bob api"))[:2], ("ALLOWED", 2))
        self.assertEqual(len(self.listing(c)), 3)
        errors = {
            "OVERRIDE x api 5/1m 0s": "ERR syntax the ttl is a duration from 1s to 366d: "
                                      "90s, 1h, 7d",
            "OVERRIDE x nope unlimited": "ERR unknown-action no policy for this action",
            "OVERRIDE x up 5/1m": "ERR syntax a funnel's override is CAPACITY,RATE "
                                  "(15,30/1m), unlimited or blocked",
            "OVERRIDE x api": "ERR syntax usage: OVERRIDE <user> <action> "
                              "unlimited|blocked|<limits> [<ttl>]",
            "OVERRIDES x": "ERR syntax usage: OVERRIDES <index> (from 0)",
        }
        got = c.pipeline(list(errors))
        self.assertEqual(dict(zip(errors, got)), errors)
        self.assertEqual(c.request("OVERRIDE x api 5/1m,5/1m").split()[:2], ["ERR", "syntax"])
        # a user the line protocol could not show on one line, through RESP
        from harness import Resp
        with Resp(port=d.port) as r:
            with self.assertRaisesRegex(Exception, "bad-user"):
                r.call("OVERRIDE", "a b", "api", "blocked")
        # fields written to Redis by someone else are checked like requests:
        # an action too long to be one, a user with a newline, are left out
        n = len(self.listing(c))
        for field in ("a" * 300 + "\nbob", "api\nx\ny"):
            self.redis.call("HSET", "rl:overrides", field, "0 unlimited")
            self.redis.call("PUBLISH", "rl:reset", "!o" + field)
        self.assertEqual(c.request("OVERRIDE sync api blocked"), "OK")
        time.sleep(0.2)
        self.assertEqual(len(self.listing(c)), n + 1)
        self.assertTrue(d.running())
        # only on admin listeners
        port2 = free_port()
        d2 = self.start_daemon(LIVE, name="rl2", port=port2, admin=False)
        c2 = d2.client()
        self.addCleanup(c2.close)
        self.assertEqual(c2.request("OVERRIDE z api unlimited"),
                         "ERR forbidden overrides need a listener with admin: true")
        # but that daemon applies them, read from Redis as soon as it answers
        wait_until(lambda: c2.request("PEEK eve api") == "DENIED 2 0 -1 -1", 2.0,
                   what="daemon 2 to read the overrides")

    def test_changed_while_decisions_are_in_flight(self):
        """An override changed (through another daemon, whose notice makes
        this one replace it) while decisions under its limits wait on Redis:
        each decision keeps the limits it started with (ASan caught a use
        after free here)."""
        self.redis = self.start_redis()
        d1, d2 = self.start_daemon(LIVE, name="rl1"), self.start_daemon(LIVE, name="rl2")
        c1, a2 = self.admin(d1), self.admin(d2)
        self.assertEqual(c1.request("OVERRIDE x api 1000/1m"), "OK")
        for k in range(20):
            c1.send(*["ALLOW x api"] * 50)
            a2.send("OVERRIDE x api %d/1m" % (1000 + k))
            got = c1.readlines(50, timeout=10)
            self.assertEqual([parse_decision(g)[0] for g in got], ["ALLOWED"] * 50)
            self.assertEqual(a2.readline(timeout=10), "OK")
        self.assertTrue(d1.running())
        wait_until(lambda: parse_decision(c1.request("PEEK x api"))[1] == 1019, 2.0,
                   what="the last override to apply")

    def test_shared_expiring_and_kept_across_restart_and_reload(self):
        self.redis = self.start_redis()
        d1 = self.start_daemon(LIVE, name="rl1")
        d2 = self.start_daemon(LIVE, name="rl2")
        c1, c2 = self.admin(d1), self.admin(d2)
        # set through one daemon, applied by the other within moments
        self.assertEqual(c1.request("OVERRIDE mallory api blocked"), "OK")
        wait_until(lambda: c2.request("ALLOW mallory api") == "DENIED 2 0 -1 -1", 2.0,
                   what="daemon 2 to apply the override")
        self.assertEqual(c2.request("UNOVERRIDE mallory api"), "OK")
        wait_until(lambda: c1.request("PEEK mallory api").startswith("ALLOWED 2 "), 2.0,
                   what="daemon 1 to see it cleared")
        # an expiry: the override's denials are not kept past it (no deny cache)
        self.assertEqual(c1.request("OVERRIDE temp api 1/1h 1s"), "OK")
        t0 = time.monotonic()
        self.assertEqual(parse_decision(c1.request("ALLOW temp api"))[:2], ("ALLOWED", 1))
        self.assertEqual(parse_decision(c1.request("ALLOW temp api"))[0], "DENIED")
        time.sleep(max(0, 1.1 - (time.monotonic() - t0)))
        self.assertEqual(parse_decision(c1.request("ALLOW temp api"))[:2], ("ALLOWED", 2))
        wait_until(lambda: self.redis.call("HEXISTS", "rl:overrides", "api\ntemp") == 0
                   or c2.request("OVERRIDES 0") == "END 0", 2.0, what="the expired one to go")
        # kept across a restart: the hash is read again at start
        self.assertEqual(c1.request("OVERRIDE vip api unlimited"), "OK")
        c2.close()
        d2.stop()
        d2.start()
        c2 = self.admin(d2)
        wait_until(lambda: c2.request("ALLOW vip api") == "ALLOWED -1 -1 0 -1", 2.0,
                   what="the restarted daemon to load the override")
        # and across a reload, on the new policy: limits are rebuilt on it
        self.assertEqual(c1.request("OVERRIDE lim api 3/1m"), "OK")
        n = len(d1.log_lines())
        d1.reload(make_config(["127.0.0.1:%d" % d1.port], {"address": self.redis.address},
                              {"api": "[2/1m, 100/1d]", "up": LIVE["up"]}))
        d1.wait_log(r"^info: reload: configuration .* loaded", start=n)
        self.assertEqual(c1.request("ALLOW vip api"), "ALLOWED -1 -1 0 -1")
        self.assertEqual(parse_decision(c1.request("ALLOW lim api"))[:3], ("ALLOWED", 3, 2))
        # a Redis that lost everything (restarted empty) loses them too: the
        # hash is the source of truth, read again when the connection returns
        self.redis.stop()
        self.redis.start()
        wait_until(lambda: c1.request("ALLOW vip api").startswith("ALLOWED 2 "), 5.0,
                   what="daemon 1 to read the empty hash again")


if __name__ == "__main__":
    unittest.main()
